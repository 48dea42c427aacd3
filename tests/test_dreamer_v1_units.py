"""Unit tests of what dreamer_v1_atari.py does differently from V2 and V3: the Gaussian KL with free nats, the actor
trained by backpropagating imagined returns through the world model (and nothing else trained by it), the value loss
that leaves the world model alone, straight-through one-hot sampling, the epsilon-greedy schedule and the lambda-returns
with a predicted discount (pcont)."""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import load_script

v1 = load_script("v1")  # dreamer_v1_atari.py, or the fork that DREAMER_V1 names

TINY = dict(deter_size=16, hidden_size=16, stoch_size=4, cnn_depth=2, mlp_units=16, reward_layers=1, discount_layers=1,
            actor_layers=1, critic_layers=1, imagination_horizon=4)  # fmt: skip
ACTIONS = 3


def tiny_models(args: v1.Args, channels: int = 3):
    torch.manual_seed(0)
    wm = v1.WorldModel((channels, 64, 64), ACTIONS, args)
    feat_size = args.deter_size + args.stoch_size
    actor = v1.Actor(feat_size, ACTIONS, args.mlp_units, args.actor_layers)
    critic = v1.Critic(feat_size, args.mlp_units, args.critic_layers)
    return wm, actor, critic


def tiny_batch(T: int = 5, B: int = 2, channels: int = 3) -> dict:
    g = torch.Generator().manual_seed(1)
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0] = True
    is_terminal = torch.zeros(T, B, dtype=torch.bool)
    is_terminal[-1, 0] = True
    return dict(
        obs=torch.randint(0, 256, (T, B, channels, 64, 64), generator=g, dtype=torch.uint8),
        action=F.one_hot(torch.randint(0, ACTIONS, (T, B), generator=g), ACTIONS).float(),
        reward=torch.randn(T, B, generator=g),
        is_first=is_first,
        is_terminal=is_terminal,
    )


def scales(args: v1.Args) -> dict:
    return {"image": 1.0, "reward": 1.0, "discount": args.discount_scale, "kl": args.kl_scale}


def run_world_model_loss(wm, args, batch):
    B = batch["action"].shape[1]
    return v1.world_model_loss(wm, batch, (wm.rssm.initial(B), torch.zeros(B, ACTIONS)), scales(args), args)


def gaussians(n: int = 6, stoch: int = 4, spread: float = 1.0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    make = lambda: dict(  # noqa: E731
        mean=(spread * torch.randn(n, stoch, generator=g)).requires_grad_(),
        std=(0.5 + torch.rand(n, stoch, generator=g)).requires_grad_(),
    )
    return make(), make()


# ---------------------------------------------------------------- KL with free nats


def test_gaussian_kl_matches_torch_distributions():
    post, prior = gaussians()
    ours = v1.gaussian_kl(post, prior)
    normal = lambda s: torch.distributions.Independent(torch.distributions.Normal(s["mean"], s["std"]), 1)  # noqa: E731
    torch.testing.assert_close(ours, torch.distributions.kl_divergence(normal(post), normal(prior)))
    assert ours.shape == (6,)
    torch.testing.assert_close(v1.gaussian_kl(post, post), torch.zeros(6), atol=1e-6, rtol=0)


def test_free_nats_pass_no_gradient_below_the_threshold():
    post, prior = gaussians(spread=0.05)  # close distributions: a KL well under 3 nats
    kl = v1.gaussian_kl(post, prior).mean()
    assert 0 < kl.item() < 3.0
    loss = v1.free_nats_kl(v1.gaussian_kl(post, prior), free=3.0)
    assert loss.item() == pytest.approx(3.0)
    grads = torch.autograd.grad(loss, [post["mean"], post["std"], prior["mean"], prior["std"]])
    assert all(g.abs().max() == 0 for g in grads)


def test_above_the_threshold_both_sides_get_the_full_kl_gradient():
    """No balancing, no stop-gradient: the prior and the posterior both get the gradient of the batch-mean KL."""
    post, prior = gaussians(spread=3.0)
    plain = v1.gaussian_kl(post, prior).mean()
    assert plain.item() > 3.0
    loss = v1.free_nats_kl(v1.gaussian_kl(post, prior), free=3.0)
    torch.testing.assert_close(loss, plain)
    tensors = [post["mean"], post["std"], prior["mean"], prior["std"]]
    for ours, expected in zip(torch.autograd.grad(loss, tensors), torch.autograd.grad(plain, tensors)):
        assert expected.abs().max() > 1e-3
        torch.testing.assert_close(ours, expected)


def test_free_nats_clip_the_batch_average_not_each_step():
    """One step far above 3 nats and many below: the mean is above 3, so every step gets a gradient (the paper's code
    clips the average; a per-step clip would pass no gradient to the steps below 3)."""
    post, prior = gaussians(n=4, spread=0.01)
    with torch.no_grad():
        post["mean"][0] += 10.0
    per_step = v1.gaussian_kl(post, prior)
    assert per_step[0] > 12 and (per_step[1:] < 3).all()
    grad = torch.autograd.grad(v1.free_nats_kl(v1.gaussian_kl(post, prior), 3.0), post["mean"])[0]
    assert (grad[1:].abs().sum(-1) > 0).all()


def test_world_model_kl_term_and_metrics():
    args = v1.Args(**TINY, kl_free=0.0)
    wm, _, _ = tiny_models(args)
    torch.manual_seed(2)
    _, losses, post, carry, metrics = run_world_model_loss(wm, args, tiny_batch())
    assert set(losses) == {"image", "reward", "discount", "kl"}
    torch.testing.assert_close(losses["kl"], metrics["kl_unclipped"])
    assert post["mean"].shape == post["std"].shape == post["stoch"].shape == (5, 2, 4)
    assert (post["std"] >= args.min_std).all()
    assert not carry[0]["deter"].requires_grad


# ---------------------------------------------------------------- behaviour: gradients through the imagined dynamics


def imagined_losses(args, wm, actor, critic, start_weight=None):
    batch = tiny_batch()
    torch.manual_seed(3)
    _, _, post, _, _ = run_world_model_loss(wm, args, batch)
    start = {k: v.detach().flatten(0, 1) for k, v in post.items()}
    torch.manual_seed(4)
    feats, _ = v1.imagine_with_actor(wm, actor, start, args.imagination_horizon)
    start_weight = torch.ones(10) if start_weight is None else start_weight
    return feats, v1.actor_critic_loss(wm, critic, feats, start_weight, args)


def test_actor_gradient_flows_through_the_imagined_dynamics():
    args = v1.Args(**TINY)
    wm, actor, critic = tiny_models(args)
    feats, (actor_loss, critic_loss, metrics) = imagined_losses(args, wm, actor, critic)
    assert feats.shape == (args.imagination_horizon, 10, args.deter_size + args.stoch_size)
    grads = torch.autograd.grad(actor_loss, list(actor.parameters()))
    assert max(g.abs().max() for g in grads) > 1e-6  # the actor learns from the returns' gradient
    # the actor's input is detached, so the only path to its weights is action -> img_step -> later states: without
    # the straight-through term of the one-hot sample there is no gradient at all
    original = v1.sample_onehot
    v1.sample_onehot = lambda logits: original(logits).detach()
    try:
        _, (cut_loss, _, _) = imagined_losses(args, wm, actor, critic)
    finally:
        v1.sample_onehot = original
    assert not cut_loss.requires_grad or all(
        g is None or g.abs().max() == 0 for g in torch.autograd.grad(cut_loss, list(actor.parameters()), allow_unused=True)
    )


def test_actor_update_touches_only_the_actor_and_the_value_loss_not_the_world_model():
    args = v1.Args(**TINY)
    wm, actor, critic = tiny_models(args)
    _, (actor_loss, critic_loss, _) = imagined_losses(args, wm, actor, critic)
    # the actor's loss depends on the world model and the critic (the gradient runs through them) ...
    wm_grads = torch.autograd.grad(actor_loss, list(wm.parameters()), retain_graph=True, allow_unused=True)
    assert any(g is not None and g.abs().max() > 0 for g in wm_grads)
    # ... though not into the critic's weights (the returns read them detached): train_step's one backward pass through
    # both losses gives the critic the gradient of its own loss alone
    critic_grads = torch.autograd.grad(actor_loss, list(critic.parameters()), retain_graph=True, allow_unused=True)
    assert all(g is None for g in critic_grads)
    # ... but backward_and_clip fills in the actor's gradients only
    norm = v1.backward_and_clip(actor_loss, list(actor.parameters()), 100.0)
    assert norm > 0 and all(p.grad is not None for p in actor.parameters())
    assert all(p.grad is None for p in list(wm.parameters()) + list(critic.parameters()))
    # the value loss reaches the critic and nothing else: its inputs and targets are detached
    assert all(g is None for g in torch.autograd.grad(critic_loss, list(wm.parameters()) + list(actor.parameters()),
                                                      retain_graph=True, allow_unused=True))  # fmt: skip
    assert max(g.abs().max() for g in torch.autograd.grad(critic_loss, list(critic.parameters()))) > 0


def test_terminal_start_states_do_not_train_the_behaviour():
    args = v1.Args(**TINY)
    wm, actor, critic = tiny_models(args)
    weight = torch.ones(10)
    weight[3] = 0.0
    feats, (actor_loss, critic_loss, _) = imagined_losses(args, wm, actor, critic, weight)
    grad_feats = torch.autograd.grad(actor_loss, feats, retain_graph=True)[0]  # [H, N, feat]
    assert grad_feats[:, 3].abs().max() == 0 and grad_feats[:, 2].abs().max() > 0


# ---------------------------------------------------------------- straight-through one-hot, epsilon-greedy


def test_straight_through_one_hot():
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 0.0, -1.0]]).repeat(20000, 1).requires_grad_()
    sample = v1.sample_onehot(logits)
    assert torch.equal(sample.detach().sum(-1), torch.ones(20000))  # one-hot forward
    assert set(sample.detach().unique().tolist()) == {0.0, 1.0}
    torch.testing.assert_close(sample.detach().mean(0), F.softmax(logits[0].detach(), -1), atol=0.01, rtol=0)
    weights = torch.tensor([1.0, 2.0, 3.0])
    (grad,) = torch.autograd.grad((sample * weights).sum(), logits)
    (expected,) = torch.autograd.grad((F.softmax(logits, -1) * weights).sum(), logits)  # the gradient of the probs
    torch.testing.assert_close(grad, expected)


def test_epsilon_falls_linearly_from_0_4_to_0_1_over_200k_gradient_steps():
    args = v1.Args()
    eps = lambda step: v1.exploration_epsilon(step, args.expl_amount, args.expl_decay, args.expl_min)  # noqa: E731
    assert (args.expl_amount, args.expl_decay, args.expl_min) == (0.4, 200_000, 0.1)
    assert eps(0) == pytest.approx(0.4)
    assert eps(50_000) == pytest.approx(0.325)
    assert eps(100_000) == pytest.approx(0.25)
    assert eps(200_000) == pytest.approx(0.1) and eps(10**7) == pytest.approx(0.1)
    assert v1.exploration_epsilon(10**6, 0.3, 0, 0.0) == 0.3  # no decay


def test_act_with_epsilon_one_is_uniform_and_zero_follows_the_actor():
    args = v1.Args(**TINY)
    wm, actor, _ = tiny_models(args)
    with torch.no_grad():
        actor.net.out.bias.copy_(torch.tensor([50.0, 0.0, 0.0]))  # the actor always picks action 0
    N = 3000
    obs = torch.zeros(N, 3, 64, 64, dtype=torch.uint8)
    state, prev, first = wm.rssm.initial(N), torch.zeros(N, ACTIONS), torch.ones(N)
    torch.manual_seed(5)
    _, greedy = v1.act(wm, actor, state, prev, obs, first, greedy=False, epsilon=0.0)
    assert (greedy.argmax(-1) == 0).all()
    _, random = v1.act(wm, actor, state, prev, obs, first, greedy=False, epsilon=1.0)
    counts = torch.bincount(random.argmax(-1), minlength=ACTIONS) / N
    torch.testing.assert_close(counts, torch.full((ACTIONS,), 1 / 3), atol=0.04, rtol=0)
    _, mixed = v1.act(wm, actor, state, prev, obs, first, greedy=False, epsilon=0.3)
    assert (mixed.argmax(-1) != 0).float().mean().item() == pytest.approx(0.3 * 2 / 3, abs=0.04)


# ---------------------------------------------------------------- lambda-returns with pcont


def test_lambda_returns_with_predicted_discount():
    """V_1 = r_1 + d_1 v_2 = 2 + 0.25 * 30 = 9.5; V_0 = r_0 + d_0 ((1 - lambda) v_1 + lambda V_1) = 1 + 0.5 * 14.75."""
    reward = torch.tensor([[1.0], [2.0]])
    discount = torch.tensor([[0.5], [0.25]])
    value = torch.tensor([[10.0], [20.0], [30.0]])
    torch.testing.assert_close(v1.lambda_returns(reward, value, discount, 0.5), torch.tensor([[8.375], [9.5]]))
    torch.testing.assert_close(v1.lambda_returns(reward, value, discount, 0.0), torch.tensor([[11.0], [9.5]]))
    torch.testing.assert_close(v1.lambda_returns(reward, value, discount, 1.0), torch.tensor([[5.75], [9.5]]))
    # a predicted end of episode (d = 0) cuts everything after it
    cut = v1.lambda_returns(reward, value, torch.tensor([[0.0], [0.25]]), 0.95)
    torch.testing.assert_close(cut[0], reward[0])


def test_discount_head_learns_gamma_times_not_terminal():
    args = v1.Args(**TINY, gamma=0.5)
    wm, _, _ = tiny_models(args)
    batch = tiny_batch()
    torch.manual_seed(3)
    _, losses, post, _, _ = run_world_model_loss(wm, args, batch)
    logits = wm.discount(wm.rssm.get_feat(post)).squeeze(-1)
    target = 0.5 * (1.0 - batch["is_terminal"].float())
    torch.testing.assert_close(losses["discount"], F.binary_cross_entropy_with_logits(logits, target))
    assert v1.Args().discount_scale == 10.0


# ---------------------------------------------------------------- shapes, resets, defaults


def test_encoder_decoder_shapes_and_relu():
    enc = v1.Encoder(3, cnn_depth=32)
    assert enc.embed_size == 1024 and all(isinstance(m, torch.nn.ReLU) for m in enc.net[1::2])
    assert enc(torch.zeros(7, 2, 3, 64, 64, dtype=torch.uint8)).shape == (7, 2, 1024)
    dec = v1.Decoder(230, 3, cnn_depth=32)
    assert dec(torch.zeros(7, 2, 230)).shape == (7, 2, 3, 64, 64)
    # the first transposed conv, computed as a matrix product, is the same maths as running the layers on a 1x1 image;
    # in float64, so that no ReLU input sits close enough to 0 for the two summation orders to switch it (in float32 an
    # input near 0 now and then lands on either side, and the gradients then differ by far more than rounding)
    dec = dec.double()
    feat = torch.randn(5, 230, dtype=torch.float64, requires_grad=True)
    plain = dec.net(dec.linear(feat).reshape(5, -1, 1, 1)) + 0.5
    torch.testing.assert_close(dec(feat), plain, atol=1e-10, rtol=1e-10)
    grads = [torch.autograd.grad(y.square().sum(), [feat, dec.net[0].weight]) for y in (dec(feat), plain)]
    for ours, expected in zip(*grads):
        torch.testing.assert_close(ours, expected, atol=1e-10, rtol=1e-10)


def test_rssm_resets_to_zeros_on_is_first():
    args = v1.Args(**TINY)
    wm, _, _ = tiny_models(args)
    B = 2
    state = {k: torch.randn_like(v) for k, v in wm.rssm.initial(B).items()}
    embed = torch.randn(B, wm.encoder.embed_size)
    torch.manual_seed(4)
    post_reset, _ = wm.rssm.obs_step(state, torch.ones(B, ACTIONS), embed, torch.ones(B))
    torch.manual_seed(4)
    post_zero, _ = wm.rssm.obs_step(wm.rssm.initial(B), torch.zeros(B, ACTIONS), embed, torch.zeros(B))
    for k in post_reset:
        torch.testing.assert_close(post_reset[k], post_zero[k])


def test_defaults_are_the_papers():
    args = v1.Args()
    assert (args.deter_size, args.hidden_size, args.stoch_size, args.cnn_depth, args.mlp_units) == (200, 200, 30, 32, 400)
    assert (args.reward_layers, args.discount_layers, args.critic_layers, args.actor_layers) == (2, 3, 3, 4)
    assert (args.batch_size, args.batch_length, args.kl_free, args.min_std) == (50, 50, 3.0, 0.1)
    assert (args.model_lr, args.actor_lr, args.critic_lr, args.model_grad_clip) == (6e-4, 8e-5, 8e-5, 100.0)
    # train_every 1,000 frames x train_steps 100 at action repeat 4: 100 gradient steps per 250 policy steps
    assert args.replay_ratio == pytest.approx(100 / (1000 / args.action_repeat))
    assert args.replay_ratio * args.batch_size * args.batch_length == pytest.approx(1000)
    assert args.learning_starts * args.action_repeat == 5000 and args.pretrain == 100


def test_compile_under_torchrun_is_refused_with_one_line():
    """--compile has not been tried under torchrun: check_args stops with the same line as dreamer_v3_atari.py's."""
    with pytest.raises(SystemExit, match=r"error: --compile does not run under torchrun yet; drop --compile, or train in "
                       r"one process$"):  # fmt: skip
        v1.check_args(v1.Args(compile=True, world_size=2))
    v1.check_args(v1.Args(compile=True))  # one process
