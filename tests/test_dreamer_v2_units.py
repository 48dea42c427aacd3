"""Unit tests of the parts of dreamer_v2_atari.py that differ from DreamerV3: KL balancing, the discount head's target,
the tanh reward transform, the target critic, the lambda-returns and the shapes of the convolutional encoder/decoder."""

import copy

import pytest
import torch

from tests.helpers import load_script

v2 = load_script("v2")  # dreamer_v2_atari.py, or the fork that DREAMER_V2 names

TINY = dict(deter_size=16, hidden_size=16, cnn_depth=2, mlp_units=16, mlp_layers=1, stoch_size=3, classes=4)


def tiny_world_model(args: v2.Args, channels: int = 1, actions: int = 3) -> v2.WorldModel:
    torch.manual_seed(0)
    return v2.WorldModel((channels, 64, 64), actions, args)


def tiny_batch(T: int = 5, B: int = 2, actions: int = 3, reward: float = 0.0) -> dict:
    g = torch.Generator().manual_seed(1)
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0] = True
    is_terminal = torch.zeros(T, B, dtype=torch.bool)
    is_terminal[-1, 0] = True
    return dict(
        obs=torch.randint(0, 256, (T, B, 1, 64, 64), generator=g, dtype=torch.uint8),
        action=torch.nn.functional.one_hot(torch.randint(0, actions, (T, B), generator=g), actions).float(),
        reward=torch.full((T, B), reward),
        is_first=is_first,
        is_terminal=is_terminal,
    )


def run_world_model_loss(wm, args, batch, scales=None):
    scales = scales or {"image": 1.0, "reward": 1.0, "discount": args.discount_scale, "kl": args.kl_scale}
    B, A = batch["action"].shape[1:]
    carry = (wm.rssm.initial(B), torch.zeros(B, A))
    return v2.world_model_loss(wm, batch, carry, scales, args)


@pytest.mark.parametrize("alpha", [0.8, 0.5, 0.1])
def test_kl_balancing_splits_the_gradient(alpha: float):
    """d kl / d prior = alpha * d KL(post || prior) / d prior, and d kl / d post = (1 - alpha) * d KL / d post.
    Without the stop-gradients both would get the full gradient; with them swapped the shares would be swapped."""
    torch.manual_seed(0)
    post, prior = torch.randn(4, 3, 5, requires_grad=True), torch.randn(4, 3, 5, requires_grad=True)
    loss, kl_prior, kl_post = v2.balanced_kl(post, prior, alpha, free=0.0)
    grad_post, grad_prior = torch.autograd.grad(loss, [post, prior])
    plain = v2.categorical_kl(post, prior).mean()
    plain_post, plain_prior = torch.autograd.grad(plain, [post, prior])
    assert plain_prior.abs().max() > 1e-3 and plain_post.abs().max() > 1e-3
    torch.testing.assert_close(grad_prior, alpha * plain_prior)
    torch.testing.assert_close(grad_post, (1 - alpha) * plain_post)
    torch.testing.assert_close(loss.detach(), plain.detach())  # the balance moves gradients, not the value
    torch.testing.assert_close(kl_prior, plain.detach())
    torch.testing.assert_close(kl_post, plain.detach())


def test_free_nats_clip_the_batch_average_not_each_element():
    """One element far above 1 nat and three below: the mean is above 1 nat, so every element's prior gets a gradient
    (the paper's code clips the batch mean; a per-element clip would pass none to the three below)."""
    post = torch.zeros(4, 3, 5)
    prior = 0.01 * torch.randn(4, 3, 5)
    prior[0, :, 0] = 5.0  # element 0's prior puts 97% on one class, the posterior is uniform
    prior.requires_grad_()
    per_element = v2.categorical_kl(post, prior)
    assert per_element[0] > 4 and (per_element[1:] < 1).all() and per_element.mean() > 1
    loss, _, _ = v2.balanced_kl(post, prior, 0.8, free=1.0)
    grad = torch.autograd.grad(loss, prior)[0]
    assert (grad[1:].abs().sum((-2, -1)) > 0).all()


def test_free_nats_below_the_threshold_pass_no_gradient():
    post = torch.zeros(4, 3, 5, requires_grad=True)
    prior = (0.01 * torch.randn(4, 3, 5)).requires_grad_()
    loss, _, _ = v2.balanced_kl(post, prior, 0.8, free=1.0)
    assert loss.item() == pytest.approx(1.0)
    assert all(g.abs().max() == 0 for g in torch.autograd.grad(loss, [post, prior]))


def test_kl_balancing_inside_the_world_model():
    """The prior's own output layer only reaches the loss through the KL, so its gradient scales with alpha exactly."""
    grads = {}
    for alpha in (1.0, 0.8, 0.0):
        args = v2.Args(**TINY, kl_balance=alpha)
        wm = tiny_world_model(args)
        torch.manual_seed(2)  # the same latent samples for every alpha
        loss, *_ = run_world_model_loss(wm, args, tiny_batch(), {"image": 0.0, "reward": 0.0, "discount": 0.0, "kl": 1.0})
        loss.backward()
        grads[alpha] = wm.rssm.img_logits.weight.grad.clone()
    assert grads[1.0].abs().max() > 1e-4
    torch.testing.assert_close(grads[0.8], 0.8 * grads[1.0])
    assert grads[0.0].abs().max() == 0


def test_discount_head_learns_gamma_times_not_terminal():
    args = v2.Args(**TINY, gamma=0.5)  # a gamma far from 1, so a target of 1 - is_terminal would not pass
    wm = tiny_world_model(args)
    batch = tiny_batch()
    torch.manual_seed(3)
    _, losses, post, _, _ = run_world_model_loss(wm, args, batch)
    logits = wm.discount(wm.rssm.get_feat(post)).squeeze(-1)
    target = 0.5 * (1.0 - batch["is_terminal"].float())
    assert target[-1, 0] == 0 and target[0, 0] == 0.5
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, target)
    torch.testing.assert_close(losses["discount"], expected)
    # the loss is smallest where the predicted probability equals the target
    x = torch.linspace(-5, 5, 1001)
    best = x[torch.nn.functional.binary_cross_entropy_with_logits(x, torch.full_like(x, 0.5), reduction="none").argmin()]
    assert torch.sigmoid(best).item() == pytest.approx(0.5, abs=0.01)


def test_reward_head_learns_tanh_of_the_reward():
    r = torch.tensor([-21.0, -1.0, 0.0, 0.5, 3.0])
    torch.testing.assert_close(v2.transform_reward(r, "tanh"), torch.tanh(r))
    torch.testing.assert_close(v2.transform_reward(r, "sign"), torch.sign(r))
    torch.testing.assert_close(v2.transform_reward(r, "identity"), r)
    args = v2.Args(**TINY)
    assert args.reward_transform == "tanh"
    wm = tiny_world_model(args)
    torch.manual_seed(3)
    _, losses, post, _, _ = run_world_model_loss(wm, args, tiny_batch(reward=3.0))
    pred = wm.reward(wm.rssm.get_feat(post)).squeeze(-1)
    expected = (0.5 * (pred - torch.tanh(torch.tensor(3.0))) ** 2).mean() + 0.5 * torch.log(torch.tensor(2 * torch.pi))
    torch.testing.assert_close(losses["reward"], expected)


def test_image_loss_is_unit_gaussian_nll_summed_over_pixels():
    mean, target = torch.full((2, 1, 64, 64), 0.25), torch.zeros(2, 1, 64, 64)
    nll = v2.gaussian_nll(mean, target, event_dims=3)
    assert nll.shape == (2,)
    torch.testing.assert_close(
        nll, torch.full((2,), 4096 * (0.5 * 0.25**2 + 0.5 * torch.log(torch.tensor(2 * torch.pi)).item()))
    )


def test_target_critic_copied_every_100_updates_and_not_before():
    torch.manual_seed(0)
    critic = v2.Critic(8, 4, 1)
    target = copy.deepcopy(critic).requires_grad_(False)
    flat = lambda m: torch.cat([p.flatten() for p in m.parameters()])  # noqa: E731
    copied_at = []
    for updates in range(301):
        with torch.no_grad():  # an optimizer step
            for p in critic.parameters():
                p.add_(1.0)
        before = flat(target).clone()
        v2.update_target_critic(critic, target, updates, every=100, fraction=1.0)
        if torch.equal(flat(target), flat(critic)):
            copied_at.append(updates)
        else:
            assert torch.equal(flat(target), before)  # untouched in between
    assert copied_at == [0, 100, 200, 300]


def test_target_critic_fraction():
    critic, target = v2.Critic(8, 4, 1), v2.Critic(8, 4, 1)
    old = [p.clone() for p in target.parameters()]
    v2.update_target_critic(critic, target, 100, every=100, fraction=0.25)
    for o, t, c in zip(old, target.parameters(), critic.parameters()):
        torch.testing.assert_close(t, o + 0.25 * (c - o))


def test_lambda_returns_hand_example():
    """R_1 = r_1 + d_1 v_2 = 2 + 0.25 * 30 = 9.5; R_0 = r_0 + d_0 ((1 - lambda) v_1 + lambda R_1) = 1 + 0.5 * 14.75."""
    reward = torch.tensor([[1.0], [2.0]])
    discount = torch.tensor([[0.5], [0.25]])
    value = torch.tensor([[10.0], [20.0], [30.0]])
    returns = v2.lambda_returns(reward, value, discount, lmbda=0.5)
    torch.testing.assert_close(returns, torch.tensor([[8.375], [9.5]]))
    # lambda 0: one-step targets r_t + d_t v_{t+1}; lambda 1: discounted sums bootstrapped with v_H
    torch.testing.assert_close(v2.lambda_returns(reward, value, discount, 0.0), torch.tensor([[11.0], [9.5]]))
    torch.testing.assert_close(v2.lambda_returns(reward, value, discount, 1.0), torch.tensor([[5.75], [9.5]]))


def test_actor_critic_loss_uses_the_target_critic_and_replayed_first_discount():
    """The returns come from the target critic (shifting it shifts them; the online critic's value does not move), and
    the replayed discount d_0 of a start state weighs its trajectory: a terminal start (d_0 = 0) ends it, so its later
    imagined states change nothing in the critic's loss, while with d_0 = gamma they do."""
    args = v2.Args(**TINY, imagination_horizon=4)
    wm = tiny_world_model(args)
    feat_size = args.deter_size + args.stoch_size * args.classes
    actor, critic = v2.Actor(feat_size, 3, 8, 1), v2.Critic(feat_size, 8, 1)
    target = copy.deepcopy(critic)
    start = {k: v[0] for k, v in run_world_model_loss(wm, args, tiny_batch())[2].items()}
    feats, actions, log_probs = v2.imagine_with_actor(wm, actor, start, args.imagination_horizon)
    assert feats.shape == (5, 2, feat_size) and actions.shape == log_probs.shape == (4, 2, 3)
    torch.testing.assert_close(log_probs, actor(feats[:-1]))  # the actor's outputs, with their graph
    actor_loss, critic_loss, metrics = v2.actor_critic_loss(wm, critic, target, feats, actions, log_probs,
                                                            torch.full((2,), args.gamma), args)  # fmt: skip
    assert actor_loss.requires_grad and critic_loss.requires_grad
    # a target critic shifted by a constant shifts the returns (d_0 = gamma on every step) but not the advantages much
    with torch.no_grad():
        target.net.out.bias.add_(100.0)
    _, _, shifted = v2.actor_critic_loss(wm, critic, target, feats, actions, log_probs, torch.full((2,), args.gamma), args)
    assert shifted["imagined_return"] - metrics["imagined_return"] > 10  # the returns come from the target critic
    assert shifted["value"] == metrics["value"]  # the online critic is untouched
    other = feats.detach().clone()
    other[1:, 1] += torch.randn_like(other[1:, 1])  # start 1's imagined states after its start

    def critic_loss_of(f, first_discount):
        return v2.actor_critic_loss(wm, critic, target, f, actions, log_probs, first_discount, args)[1]

    terminal_start = torch.tensor([args.gamma, 0.0])
    torch.testing.assert_close(critic_loss_of(feats, terminal_start), critic_loss_of(other, terminal_start))
    full = torch.full((2,), args.gamma)
    assert (critic_loss_of(feats, full) - critic_loss_of(other, full)).abs() > 1e-4


def test_encoder_decoder_shapes():
    for channels in (1, 3):
        enc = v2.Encoder(channels, cnn_depth=48)
        sizes, x = [], torch.zeros(1, channels, 64, 64)
        for layer in enc.net:
            x = layer(x)
            sizes.append(x.shape[-1])
        assert sizes[::2] == [31, 14, 6, 2]  # 'valid' 4x4 stride-2 convs
        assert enc.embed_size == 48 * 8 * 2 * 2
        embed = enc(torch.zeros(7, 3, channels, 64, 64, dtype=torch.uint8))
        assert embed.shape == (7, 3, 1536)
        dec = v2.Decoder(100, channels, cnn_depth=48)
        x = dec.linear(torch.zeros(1, 100)).reshape(1, -1, 1, 1)
        assert x.shape[1] == 32 * 48
        sizes = []
        for layer in dec.net:
            x = layer(x)
            sizes.append(x.shape[-1])
        assert sizes[::2] == [5, 13, 30, 64]
        assert dec(torch.zeros(7, 3, 100)).shape == (7, 3, channels, 64, 64)
        # the first transposed conv, computed as a matrix product, is the same maths as the layers on a 1x1 image
        feat = torch.randn(5, 100, requires_grad=True)
        plain = dec.net(dec.linear(feat).reshape(5, -1, 1, 1)) + 0.5
        torch.testing.assert_close(dec(feat), plain, atol=1e-5, rtol=1e-5)
        grads = [torch.autograd.grad(y.square().sum(), [feat, dec.net[0].weight]) for y in (dec(feat), plain)]
        for ours, expected in zip(*grads):
            torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


def test_rssm_resets_to_zeros_on_is_first():
    args = v2.Args(**TINY)
    wm = tiny_world_model(args)
    B, A = 2, 3
    state = {k: torch.randn_like(v) for k, v in wm.rssm.initial(B).items()}
    embed = torch.randn(B, wm.encoder.embed_size)
    torch.manual_seed(4)
    post_reset, _ = wm.rssm.obs_step(state, torch.ones(B, A), embed, torch.ones(B))
    torch.manual_seed(4)
    post_zero, _ = wm.rssm.obs_step(wm.rssm.initial(B), torch.zeros(B, A), embed, torch.zeros(B))
    for k in post_reset:
        torch.testing.assert_close(post_reset[k], post_zero[k])


def test_compile_under_torchrun_is_refused_with_one_line():
    """--compile has not been tried under torchrun: the flag check stops the pair with one line, as in
    dreamer_v3_atari.py."""
    v2.check_args(v2.Args(compile=True))  # one process: accepted
    with pytest.raises(SystemExit, match=r"error: --compile does not run under torchrun yet; drop --compile, or train in "
                       r"one process$"):  # fmt: skip
        v2.check_args(v2.Args(compile=True, world_size=2))
