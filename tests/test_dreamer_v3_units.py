"""Unit tests of the pieces of dreamer_v3_atari.py: symlog and twohot, lambda-returns, the stop-gradients and free bits of
the KL losses, is_first resets, the return normaliser, the TBPTT sequence replay, and what the actor-critic losses touch.
The script is imported as a module (it has no side effects on import) by tests/helpers.py's load_script, which imports a
fork instead when DREAMER_V3 names one."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.helpers import load_script

v3 = load_script("v3")  # dreamer_v3_atari.py, or the fork that DREAMER_V3 names

TINY = dict(deter_size=16, hidden_size=16, cnn_depth=2, mlp_units=16, mlp_layers=1, stoch_size=3, classes=4)
ACTIONS = 3
SCALE_KEYS = ("image", "reward", "cont", "dyn", "rep")


def tiny_args(**overrides) -> v3.Args:
    return v3.Args(**{**TINY, **overrides})


def tiny_world_model(args: v3.Args) -> v3.WorldModel:
    torch.manual_seed(0)
    return v3.WorldModel((3, 64, 64), ACTIONS, args)


def tiny_batch(T: int, B: int) -> dict:
    g = torch.Generator().manual_seed(1)
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0, 0] = True
    return dict(
        obs=torch.randint(0, 256, (T, B, 3, 64, 64), generator=g, dtype=torch.uint8),
        action=F.one_hot(torch.randint(0, ACTIONS, (T, B), generator=g), ACTIONS).float(),
        reward=torch.randn(T, B, generator=g),
        is_first=is_first,
        is_terminal=torch.zeros(T, B, dtype=torch.bool),
    )


def carry_for(wm: v3.WorldModel, B: int) -> tuple:
    state = {k: v.detach().clone() for k, v in wm.rssm.initial(B).items()}
    return state, torch.zeros(B, ACTIONS)


def only(**scales) -> dict:
    return {k: float(scales.get(k, 0.0)) for k in SCALE_KEYS}


def grad_is_zero(p: torch.nn.Parameter) -> bool:
    return p.grad is None or bool((p.grad == 0).all())


def params_of(*modules) -> list:
    return [p for m in modules for p in m.parameters()]


# symlog / symexp


def test_symlog_symexp_round_trip():
    x = torch.tensor([-1e6, -12345.678, -20.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 20.0, 987.65, 1e6], dtype=torch.float64)
    torch.testing.assert_close(v3.symexp(v3.symlog(x)), x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(v3.symlog(v3.symexp(x.clamp(-50, 50))), x.clamp(-50, 50), rtol=1e-12, atol=1e-12)
    # symlog(x) = sign(x) log(1 + |x|): odd, and compresses large magnitudes
    torch.testing.assert_close(v3.symlog(torch.tensor([-(np.e - 1), 0.0, np.e - 1])), torch.tensor([-1.0, 0.0, 1.0]))
    assert v3.symlog(torch.tensor(1e6)).item() == pytest.approx(np.log1p(1e6))


# twohot

BINS = torch.tensor([-1.0, 0.0, 0.5, 2.0])  # uneven on purpose


def test_twohot_on_bins_is_one_hot():
    for i, b in enumerate(BINS):
        torch.testing.assert_close(v3.twohot(b[None], BINS)[0], F.one_hot(torch.tensor(i), 4).float())


def test_twohot_between_bins():
    x = torch.tensor([0.25, 1.0, -0.75])
    expected = torch.tensor(
        [
            [0.0, 0.5, 0.5, 0.0],  # 0.25 is halfway between 0 and 0.5
            [0.0, 0.0, 2 / 3, 1 / 3],  # 1.0 is 0.5 above 0.5 and 1.0 below 2.0: weights 1.0/1.5 and 0.5/1.5
            [0.75, 0.25, 0.0, 0.0],  # -0.75 is 0.25 above -1 and 0.75 below 0
        ]
    )
    torch.testing.assert_close(v3.twohot(x, BINS), expected)


def test_twohot_outside_range_clips_to_end_bins():
    out = v3.twohot(torch.tensor([-5.0, -1.0001, 2.0001, 1e9]), BINS)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0], [0, 0, 0, 1.0], [0, 0, 0, 1.0]]))


def test_twohot_decodes_to_the_value_inside_the_range():
    bins = torch.linspace(-20, 20, 255)
    x = torch.cat([torch.linspace(-20, 20, 1001), torch.tensor([-19.99, -0.0123, 0.0, 3.14159, 19.99])])
    weights = v3.twohot(x, bins)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(x))
    assert (weights >= 0).all() and ((weights > 0).sum(-1) <= 2).all()
    torch.testing.assert_close((weights * bins).sum(-1), x, atol=1e-5, rtol=0)


def test_twohot_mean_and_loss_agree():
    """A distribution that puts its mass exactly on twohot(symlog(x)) has mean x, and is the minimum of twohot_loss."""
    bins = torch.linspace(-20, 20, 255)
    x = torch.tensor([-1234.5, -3.0, -0.2, 0.0, 0.7, 1.0, 42.0, 1e5])
    target = v3.twohot(v3.symlog(x), bins)
    logits = torch.log(target)  # -inf off the two bins: softmax gives back exactly `target`
    torch.testing.assert_close(v3.twohot_mean(logits, bins), x, rtol=1e-4, atol=1e-5)
    # the cross-entropy against twohot(symlog(x)) has zero gradient at logits = log(target) (softmax - target = 0) ...
    near = torch.log(target + 1e-12).requires_grad_(True)
    v3.twohot_loss(near, x, bins).sum().backward()
    assert near.grad.abs().max() < 1e-6
    # ... and any other distribution has a higher loss
    other = near.detach() + torch.randn(near.shape, generator=torch.Generator().manual_seed(0))
    assert (v3.twohot_loss(other, x, bins) > v3.twohot_loss(near.detach(), x, bins)).all()
    # and it is -log p of the target distribution, written out
    logits = torch.randn(len(x), 255, generator=torch.Generator().manual_seed(1))
    expected = -(target * F.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(v3.twohot_loss(logits, x, bins), expected)


# lambda-returns


def test_lambda_returns_hand_computed():
    gamma, lmbda = 0.9, 0.5
    reward = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])  # r_1, r_2, r_3 for two trajectories
    value = torch.tensor([[0.5, 0.5], [1.0, 1.0], [2.0, 2.0], [4.0, 4.0]])  # v_0..v_3
    cont = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])  # c_1..c_3; the 2nd trajectory ends at step 2
    # R_t = r_{t+1} + gamma c_{t+1} ((1 - lambda) v_{t+1} + lambda R_{t+1}),  R_3 = v_3 = 4
    # trajectory 1:
    #   R_2 = 3 + 0.9 * (0.5 * 4 + 0.5 * 4)    = 3 + 0.9 * 4     = 6.6
    #   R_1 = 2 + 0.9 * (0.5 * 2 + 0.5 * 6.6)  = 2 + 0.9 * 4.3   = 5.87
    #   R_0 = 1 + 0.9 * (0.5 * 1 + 0.5 * 5.87) = 1 + 0.9 * 3.435 = 4.0915
    # trajectory 2 (c_2 = 0 cuts everything after r_2):
    #   R_2 = 6.6;  R_1 = 2 + 0.9 * 0 * (...) = 2;  R_0 = 1 + 0.9 * (0.5 * 1 + 0.5 * 2) = 2.35
    expected = torch.tensor([[4.0915, 2.35], [5.87, 2.0], [6.6, 6.6]])
    torch.testing.assert_close(v3.lambda_returns(reward, value, cont, gamma, lmbda), expected)


def test_lambda_returns_special_cases():
    g = torch.Generator().manual_seed(0)
    H, N, gamma = 4, 3, 0.8
    reward, value = torch.randn(H, N, generator=g), torch.randn(H + 1, N, generator=g)
    cont = (torch.rand(H, N, generator=g) > 0.3).float()
    # lambda = 0: one-step TD targets r_{t+1} + gamma c_{t+1} v_{t+1}
    torch.testing.assert_close(v3.lambda_returns(reward, value, cont, gamma, 0.0), reward + gamma * cont * value[1:])
    # lambda = 1: discounted reward sums to the end, bootstrapped with v_H
    expected = torch.zeros(H, N)
    for t in range(H):
        total, discount = torch.zeros(N), torch.ones(N)
        for k in range(t, H):
            total = total + discount * reward[k]
            discount = discount * gamma * cont[k]
        expected[t] = total + discount * value[H]
    torch.testing.assert_close(v3.lambda_returns(reward, value, cont, gamma, 1.0), expected)


# KL losses: stop-gradients and free bits


def test_categorical_kl_stop_gradients_on_leaves():
    g = torch.Generator().manual_seed(0)
    post = torch.randn(2, 3, 4, generator=g).requires_grad_(True)
    prior = torch.randn(2, 3, 4, generator=g).requires_grad_(True)
    v3.categorical_kl(post.detach(), prior).sum().backward()  # the dyn term
    assert post.grad is None and prior.grad.abs().sum() > 0
    prior.grad = None
    v3.categorical_kl(post, prior.detach()).sum().backward()  # the rep term
    assert prior.grad is None and post.grad.abs().sum() > 0


def rssm_groups(wm: v3.WorldModel) -> dict:
    r = wm.rssm
    return dict(
        posterior=params_of(r.obs_out, r.obs_logits, wm.encoder),  # only the posterior q(z | h, x) uses these
        prior_head=params_of(r.img_out, r.img_logits),  # only the prior p(z | h) uses these
    )


def test_dyn_loss_trains_only_the_prior():
    """dyn = KL[sg(post) || prior]. With one time step the prior sees only the detached carry, so no gradient may reach
    the posterior's layers. (Over longer chunks the prior at t reads z_{t-1}, a straight-through sample of the
    posterior, and the sequence model legitimately passes gradient back to it, as in Hafner's code.)"""
    args = tiny_args()
    wm = tiny_world_model(args)
    batch = tiny_batch(T=1, B=4)
    batch["is_first"][:] = False
    loss, losses, *_ = v3.world_model_loss(wm, batch, carry_for(wm, 4), only(dyn=1.0), kl_free=0.0)
    assert losses["dyn"] > 0
    loss.backward()
    groups = rssm_groups(wm)
    assert all(grad_is_zero(p) for p in groups["posterior"])
    assert any(not grad_is_zero(p) for p in groups["prior_head"])
    assert all(grad_is_zero(p) for p in params_of(wm.decoder, wm.reward, wm.cont))


@pytest.mark.parametrize("T", [1, 6])
def test_rep_loss_trains_only_the_posterior(T: int):
    """rep = KL[post || sg(prior)]: the prior's own head never gets gradient, over any chunk length."""
    args = tiny_args()
    wm = tiny_world_model(args)
    loss, losses, *_ = v3.world_model_loss(wm, tiny_batch(T=T, B=4), carry_for(wm, 4), only(rep=1.0), kl_free=0.0)
    assert losses["rep"] > 0
    loss.backward()
    groups = rssm_groups(wm)
    assert all(grad_is_zero(p) for p in groups["prior_head"])
    assert any(not grad_is_zero(p) for p in params_of(wm.rssm.obs_logits))
    assert any(not grad_is_zero(p) for p in params_of(wm.encoder))


@pytest.mark.parametrize("term", ["dyn", "rep"])
def test_free_bits_clip_each_step(term: str):
    """The clip is per time step (the 2023 code's), not of the batch mean: with kl_free between the steps' KLs, the steps
    above keep their KL and those below are set to kl_free."""
    args = tiny_args()
    wm = tiny_world_model(args)
    batch, carry = tiny_batch(T=3, B=2), carry_for(wm, 2)
    torch.manual_seed(0)
    _, unclipped, post, *_ = v3.world_model_loss(wm, batch, carry, only(**{term: 1.0}), kl_free=0.0)
    with torch.no_grad():  # each step's KL: the prior at step t reads only h_t
        kl = v3.categorical_kl(post["logits"], wm.rssm.prior_logits(post["deter"]))  # [T, B]
    torch.testing.assert_close(unclipped[term], kl.mean())
    values = kl.flatten().sort().values
    kl_free = ((values[2] + values[3]) / 2).item()
    assert values[2] < kl_free < values[3]
    torch.manual_seed(0)
    _, clipped, *_ = v3.world_model_loss(wm, batch, carry, only(**{term: 1.0}), kl_free=kl_free)
    torch.testing.assert_close(clipped[term], kl.clamp(min=kl_free).mean())
    assert abs(kl.clamp(min=kl_free).mean() - max(kl.mean(), kl_free)) > 1e-3  # a clip of the mean would differ


@pytest.mark.parametrize("term", ["dyn", "rep"])
def test_free_bits(term: str):
    """Below kl_free nats the KL term is exactly kl_free and does not train anything."""
    args = tiny_args()
    wm = tiny_world_model(args)
    batch, carry = tiny_batch(T=3, B=2), carry_for(wm, 2)
    _, losses, _, _, metrics = v3.world_model_loss(wm, batch, carry, only(**{term: 1.0}), kl_free=0.0)
    kl_free = 1000.0
    assert metrics["kl"] < kl_free
    loss, losses, *_ = v3.world_model_loss(wm, batch, carry, only(**{term: 1.0}), kl_free=kl_free)
    assert losses[term].item() == kl_free
    loss.backward()
    assert all(grad_is_zero(p) for p in wm.parameters())


def test_loss_scales_weight_the_losses():
    args = tiny_args()
    wm = tiny_world_model(args)
    batch, carry = tiny_batch(T=3, B=2), carry_for(wm, 2)
    scales = dict(image=0.5, reward=2.0, cont=3.0, dyn=0.25, rep=4.0)
    torch.manual_seed(5)
    loss, losses, *_ = v3.world_model_loss(wm, batch, carry, scales, kl_free=1.0)
    torch.testing.assert_close(loss, sum(scales[k] * losses[k] for k in SCALE_KEYS))
    with pytest.raises(AssertionError):
        v3.world_model_loss(wm, batch, carry, {"image": 1.0}, kl_free=1.0)


# is_first resets the state


def test_is_first_resets_the_state():
    args = tiny_args()
    wm = tiny_world_model(args)
    B = 3
    g = torch.Generator().manual_seed(3)
    embed = torch.randn(B, wm.encoder.embed_size, generator=g)

    def random_state():
        logits = torch.randn(B, args.stoch_size, args.classes, generator=g)
        stoch = F.one_hot(logits.argmax(-1), args.classes).float()
        return dict(deter=torch.randn(B, args.deter_size, generator=g), stoch=stoch, logits=logits)

    def step(state, action, is_first):
        torch.manual_seed(123)  # the same sampling noise for every call
        with torch.no_grad():
            return wm.rssm.obs_step(state, action, embed, torch.full((B,), float(is_first)))

    a1, a2 = F.one_hot(torch.tensor([0, 1, 2]), ACTIONS).float(), F.one_hot(torch.tensor([2, 2, 0]), ACTIONS).float()
    s1, s2 = random_state(), random_state()
    reset1, reset2 = step(s1, a1, True), step(s2, a2, True)
    for post_or_prior in (0, 1):
        for key in ("deter", "stoch", "logits"):
            torch.testing.assert_close(reset1[post_or_prior][key], reset2[post_or_prior][key], rtol=0, atol=0)
    # a reset gives what the initial state with a zero action gives
    fresh = step(wm.rssm.initial(B), torch.zeros(B, ACTIONS), False)
    torch.testing.assert_close(reset1[0]["deter"], fresh[0]["deter"])
    torch.testing.assert_close(reset1[0]["logits"], fresh[0]["logits"])
    # without the reset, the previous state and action matter
    kept1, kept2, kept1_other_action = step(s1, a1, False), step(s2, a2, False), step(s1, a2, False)
    assert not torch.allclose(kept1[0]["deter"], kept2[0]["deter"])
    assert not torch.allclose(kept1[0]["deter"], kept1_other_action[0]["deter"])
    assert not torch.allclose(kept1[0]["deter"], reset1[0]["deter"])


def test_is_first_resets_per_row():
    args = tiny_args()
    wm = tiny_world_model(args)
    B = 2
    embed = torch.randn(B, wm.encoder.embed_size)
    state = dict(deter=torch.randn(B, args.deter_size), stoch=F.one_hot(torch.zeros(B, args.stoch_size).long(), 4).float(),
                 logits=torch.randn(B, args.stoch_size, args.classes))  # fmt: skip
    with torch.no_grad():
        post, _ = wm.rssm.obs_step(state, torch.ones(B, ACTIONS), embed, torch.tensor([1.0, 0.0]))
        fresh, _ = wm.rssm.obs_step(wm.rssm.initial(B), torch.zeros(B, ACTIONS), embed, torch.zeros(B))
    torch.testing.assert_close(post["deter"][0], fresh["deter"][0])
    assert not torch.allclose(post["deter"][1], fresh["deter"][1])


# return normaliser


def test_return_norm_percentiles_and_ema():
    decay = 0.9
    norm = v3.ReturnNorm(decay, limit=1.0)
    g = torch.Generator().manual_seed(0)
    r1, r2 = torch.randn(15, 64, generator=g) * 10, torch.randn(15, 64, generator=g) * 30 + 5
    q1 = np.percentile(r1.numpy().ravel(), [5, 95])
    q2 = np.percentile(r2.numpy().ravel(), [5, 95])
    norm.update(r1)
    np.testing.assert_allclose(norm.ema.numpy(), (1 - decay) * q1, rtol=1e-5)  # the EMA starts at 0
    scale = norm.update(r2)
    ema = decay * (1 - decay) * q1 + (1 - decay) * q2
    np.testing.assert_allclose(norm.ema.numpy(), ema, rtol=1e-5)
    assert scale.item() == pytest.approx(max(1.0, ema[1] - ema[0]), rel=1e-5)
    assert scale.item() > 1.0  # the percentile range is wide here, so the floor is not what sets the scale


def test_return_norm_floor():
    norm = v3.ReturnNorm(0.99, limit=1.0)
    assert norm.scale().item() == 1.0
    for _ in range(50):
        scale = norm.update(torch.linspace(-0.1, 0.1, 100))  # a percentile range far below the limit
        assert scale.item() == 1.0
    norm = v3.ReturnNorm(0.0, limit=2.5)  # decay 0: the scale is this batch's P95 - P5
    assert norm.update(torch.linspace(0, 1, 101)).item() == 2.5
    assert norm.update(torch.linspace(0, 100, 101)).item() == pytest.approx(90.0)


# TBPTT sequence replay


def make_replay(capacity=1000, num_envs=2, batch_size=6, T=4, tbptt=True, jump_prob=0.0, seed=0) -> v3.SequenceReplay:
    return v3.SequenceReplay(capacity * num_envs, num_envs, (1, 2, 2), ACTIONS, batch_size, T, tbptt, jump_prob, seed)


def fill(rb: v3.SequenceReplay, steps: int):
    """Add `steps` vector steps; the reward encodes (env, step index g) as 100_000 * env + g, the frame encodes g."""
    for _ in range(steps):
        g = rb.added
        rb.add(
            np.full((rb.num_envs, 1, 2, 2), g % 256, np.uint8),
            np.eye(ACTIONS, dtype=np.float32)[np.full(rb.num_envs, g % ACTIONS)],
            100_000.0 * np.arange(rb.num_envs) + g,
            np.zeros(rb.num_envs, bool),
            np.zeros(rb.num_envs, bool),
        )


def positions(batch: dict) -> tuple:
    """(env [B], step index of every element [T, B]) decoded from the rewards."""
    env = (batch["reward"] // 100_000).astype(int)
    g = (batch["reward"] % 100_000).astype(int)
    assert (env == env[0]).all()  # a row stays in one env
    assert (np.diff(g, axis=0) == 1).all()  # and is contiguous
    assert (batch["obs"][..., 0, 0, 0] == g % 256).all()
    return env[0], g


def test_replay_shapes_and_dtypes():
    rb = make_replay()
    fill(rb, 50)
    assert len(rb) == 100 and rb.can_sample()
    batch = rb.sample()
    assert batch["obs"].shape == (4, 6, 1, 2, 2) and batch["obs"].dtype == np.uint8
    assert batch["action"].shape == (4, 6, ACTIONS) and batch["reward"].shape == (4, 6)
    assert batch["is_first"].dtype == bool and batch["is_terminal"].dtype == bool


def test_replay_rows_continue():
    T = 4
    rb = make_replay(T=T)
    fill(rb, 100)
    env1, g1 = positions(b1 := rb.sample())
    assert b1["is_first"][0].all()  # the first chunk of every row starts fresh
    fill(rb, T)  # every row's next chunk is now fully written
    for _ in range(5):
        env2, g2 = positions(b2 := rb.sample())
        assert (env2 == env1).all()
        assert (g2[0] == g1[-1] + 1).all()  # the next chunk starts where the previous one ended
        assert not b2["is_first"].any()  # is_first is not forced: the carried state is used
        env1, g1 = env2, g2
        fill(rb, T)


def test_replay_rows_restart_when_their_next_chunk_is_not_written_yet():
    """A row whose next chunk is not fully written restarts (is_first) at a chunk of written steps."""
    T = 4
    rb = make_replay(T=T)
    fill(rb, T)  # only one possible chunk: [0, T)
    _, g1 = positions(rb.sample())
    assert (g1[0] == 0).all()
    fill(rb, T - 1)  # the chunk [T, 2T) is not fully written yet
    _, g2 = positions(b2 := rb.sample())
    assert b2["is_first"][0].all()
    assert ((g2[0] >= 0) & (g2[-1] <= 2 * T - 2)).all()


def test_replay_partial_restart():
    """Rows whose next chunk is written continue; the others restart."""
    T = 4
    rb = make_replay(T=T, batch_size=64)
    fill(rb, 30)
    _, g1 = positions(rb.sample())
    _, g2 = positions(b2 := rb.sample())
    continued = g1[-1] + 1 + T <= 30  # the next chunk [g1[-1] + 1, g1[-1] + 1 + T) fits into 30 steps
    assert continued.any() and (~continued).any()
    assert (g2[0][continued] == g1[-1][continued] + 1).all() and not b2["is_first"][0][continued].any()
    assert b2["is_first"][0][~continued].all()


def test_replay_jump_prob_one_always_restarts():
    rb = make_replay(jump_prob=1.0)
    fill(rb, 500)
    starts = []
    for _ in range(10):
        _, g = positions(b := rb.sample())
        assert b["is_first"][0].all()
        starts.append(g[0])
    assert len(np.unique(np.concatenate(starts))) > 20  # uniform starts, not a sweep


def test_replay_jump_prob_restarts_a_fraction():
    T = 2
    rb = make_replay(T=T, batch_size=200, jump_prob=0.25, seed=1)
    fill(rb, 1000)
    _, g1 = positions(rb.sample())
    fill(rb, T)
    _, g2 = positions(b2 := rb.sample())
    jumped = b2["is_first"][0]
    assert 0.15 < jumped.mean() < 0.35
    assert (g2[0][~jumped] == g1[-1][~jumped] + 1).all()


def test_replay_without_tbptt_always_restarts():
    rb = make_replay(tbptt=False)
    fill(rb, 500)
    for _ in range(10):
        _, g = positions(b := rb.sample())
        assert b["is_first"][0].all()
        assert not b["is_first"][1:].any()
        fill(rb, 4)


def test_replay_overwritten_data_forces_a_restart():
    T, capacity = 4, 20
    rb = make_replay(capacity=capacity, T=T)
    fill(rb, capacity)
    _, g1 = positions(rb.sample())
    assert (g1[-1] <= capacity - 1).all()
    fill(rb, 30)  # added = 50: steps 0..29 are overwritten, the rows' next chunks are gone
    _, g2 = positions(b2 := rb.sample())
    assert b2["is_first"][0].all()
    assert ((g2[0] >= 30) & (g2[-1] <= 49)).all()  # restarted inside the live data [oldest, newest]


def test_replay_samples_every_stored_step():
    T = 4
    rb = make_replay(capacity=40, num_envs=1, batch_size=2, T=T, jump_prob=1 / 16)
    fill(rb, 40)
    seen = np.zeros(40, bool)
    for _ in range(200):
        _, g = positions(rb.sample())
        seen[g.ravel()] = True
    assert seen.all()


@pytest.mark.parametrize("wrapped", [False, True])
def test_replay_state_dict_with_data(wrapped: bool):
    rb = make_replay(capacity=30, T=4, jump_prob=0.3)
    fill(rb, 47 if wrapped else 25)
    for _ in range(3):
        rb.sample()
    state = copy.deepcopy(rb.state_dict(with_data=True))
    assert state["obs"].shape[0] == min(rb.added, rb.capacity)
    restored = make_replay(capacity=30, T=4, jump_prob=0.3, seed=99)
    restored.load_state_dict(state)
    assert restored.added == rb.added and len(restored) == len(rb)
    for _ in range(4):
        a, b = rb.sample(), restored.sample()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_replay_state_dict_without_data():
    """Without data the buffer starts empty with fresh rows but the same random stream: after the same data is added
    again, it draws exactly what the original would draw from fresh rows."""
    rb = make_replay(T=4, jump_prob=0.3)
    fill(rb, 60)
    for _ in range(3):
        rb.sample()
    state = copy.deepcopy(rb.state_dict(with_data=False))
    assert "obs" not in state
    restored = make_replay(T=4, jump_prob=0.3, seed=99)
    restored.load_state_dict(state)
    assert restored.added == 0 and len(restored) == 0 and not restored.can_sample()
    assert (restored.row_next == -1).all()
    fill(restored, 60)
    reference = copy.deepcopy(rb)
    reference.row_next[:] = -1
    for _ in range(3):
        a, b = reference.sample(), restored.sample()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


# actor and critic


def imagined(args: v3.Args, N: int = 8, H: int = 5):
    wm = tiny_world_model(args)
    feat_size = args.deter_size + args.stoch_size * args.classes
    actor = v3.Actor(feat_size, ACTIONS, args.mlp_units, args.mlp_layers, args.unimix)
    critic = v3.Critic(feat_size, args.reward_bins, args.mlp_units, args.mlp_layers)
    start = {k: v.detach() for k, v in wm.rssm.initial(N).items()}
    start["deter"] = start["deter"] + torch.randn(N, args.deter_size)  # varied start states
    feats, actions, log_probs = v3.imagine_with_actor(wm, actor, start, H)
    return wm, actor, critic, feats, actions, log_probs


def test_imagine_with_actor_shapes_and_no_graph():
    args = tiny_args()
    wm, actor, critic, feats, actions, log_probs = imagined(args, N=8, H=5)
    assert feats.shape == (6, 8, args.deter_size + args.stoch_size * args.classes)
    assert actions.shape == log_probs.shape == (5, 8, ACTIONS)
    torch.testing.assert_close(actions, F.one_hot(actions.argmax(-1), ACTIONS).float())  # one-hot, up to rounding
    assert not feats.requires_grad and not actions.requires_grad
    torch.testing.assert_close(log_probs, actor(feats[:-1]))  # the actor's outputs, with their graph
    assert log_probs.requires_grad


def test_critic_starts_at_zero():
    args = tiny_args()
    _, _, critic, feats, _, _ = imagined(args)
    logits = critic(feats)
    assert logits.shape[-1] == args.reward_bins
    assert (logits == 0).all()  # zero-initialised output layer
    bins = torch.linspace(-20, 20, args.reward_bins)
    torch.testing.assert_close(v3.twohot_mean(logits, bins), torch.zeros(feats.shape[:2]), atol=1e-5, rtol=0)


def test_actor_critic_losses_touch_only_their_own_networks():
    args = tiny_args()
    wm, actor, critic, feats, actions, log_probs = imagined(args)
    slow_critic = copy.deepcopy(critic).requires_grad_(False)
    norm = v3.ReturnNorm(args.return_norm_decay, args.return_norm_limit)
    first_cont = torch.ones(feats.shape[1])
    actor_loss, critic_loss, metrics = v3.actor_critic_loss(wm, critic, slow_critic, norm, feats, actions, log_probs,
                                                            first_cont, args)  # fmt: skip
    assert torch.isfinite(actor_loss) and torch.isfinite(critic_loss)
    assert set(metrics) >= {"return_scale", "actor_entropy", "imagined_return", "value"}
    actor_loss.backward(retain_graph=True)
    assert all(p.grad is None for p in wm.parameters())
    assert all(p.grad is None for p in critic.parameters())  # the advantage's baseline is stopped
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.parameters())
    actor.zero_grad(set_to_none=True)
    critic_loss.backward()
    assert all(p.grad is None for p in wm.parameters())
    assert all(p.grad is None for p in actor.parameters())
    assert critic.net.out.weight.grad is not None and critic.net.out.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in slow_critic.parameters())


def test_actor_and_critic_losses_against_their_formulas():
    """With the entropy term off, the actor's gradient is that of -mean(weight * log pi(a) * sg((R - v) / S)), and the
    critic's loss is mean(weight * (twohot(v; R) + slow_reg twohot(v; v_slow))): the returns and the baseline come from
    the online critic, the slow critic only regularises, and a terminal start state (c_0 = 0) weighs nothing."""
    args = tiny_args(actor_entropy=0.0)
    wm, actor, critic, feats, actions, log_probs = imagined(args)
    slow_critic = copy.deepcopy(critic)
    with torch.no_grad():  # online, slow and reward heads all differ, so mixing them up changes the numbers
        critic.net.out.weight.normal_(0.0, 0.1)
        slow_critic.net.out.weight.normal_(0.0, 0.1)
        wm.reward.out.weight.normal_(0.0, 0.1)
    first_cont = torch.ones(feats.shape[1])
    first_cont[0] = 0.0
    norm = v3.ReturnNorm(args.return_norm_decay, args.return_norm_limit)
    actor_loss, critic_loss, metrics = v3.actor_critic_loss(wm, critic, slow_critic, copy.deepcopy(norm), feats, actions,
                                                            log_probs, first_cont, args)  # fmt: skip
    with torch.no_grad():
        reward = v3.twohot_mean(wm.reward(feats[1:]), wm.bins)
        cont = torch.cat([first_cont[None], (wm.cont(feats[1:]).squeeze(-1) > 0).float()], 0)
        weight = torch.cumprod(args.gamma * cont, 0) / args.gamma
        value = v3.twohot_mean(critic(feats), wm.bins)
        returns = v3.lambda_returns(reward, value, cont[1:], args.gamma, args.lmbda)
        advantage = (returns - value[:-1]) / norm.update(returns)
    log_pi = (actions * actor(feats[:-1])).sum(-1)
    expected = (-(log_pi * advantage) * weight[:-1]).mean()
    torch.testing.assert_close(actor_loss, expected)
    torch.testing.assert_close(metrics["imagined_return"], returns.mean())
    assert (weight[:, 0] == 0).all() and (weight[0, 1:] == 1).all()
    logits = critic(feats[:-1])
    slow_value = v3.twohot_mean(slow_critic(feats[:-1]), wm.bins).detach()
    per_step = v3.twohot_loss(logits, returns, wm.bins) + args.slow_critic_reg * v3.twohot_loss(logits, slow_value, wm.bins)
    torch.testing.assert_close(critic_loss, (per_step * weight[:-1]).mean())


@pytest.mark.parametrize("script", ["v2", "v3", "v2-dmc"])
def test_onehot_samples_follow_the_probabilities(script):
    """sample_onehot (inverse CDF) draws each class with its probability, per latent, never an impossible class, and its
    gradient is the gradient of the probabilities (straight-through)."""
    module = load_script(script)
    torch.manual_seed(0)
    logits = torch.tensor([[1.0, 0.0, -1.0, -float("inf")], [20.0, 0.0, 0.0, 0.0]]).repeat(20000, 1, 1).requires_grad_()
    sample = module.sample_onehot(logits)  # [20000, 2 latents, 4 classes]
    assert torch.equal(sample.detach().sum(-1), torch.ones(20000, 2))
    torch.testing.assert_close(sample.detach().mean(0), torch.softmax(logits[0].detach(), -1), atol=0.01, rtol=0)
    assert sample.detach()[:, 0, 3].sum() == 0  # probability 0
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])
    (grad,) = torch.autograd.grad((sample * weights).sum(), logits)
    (expected,) = torch.autograd.grad((torch.softmax(logits, -1) * weights).sum(), logits)
    torch.testing.assert_close(grad, expected)


def test_model_size_presets_and_single_size_flags_override_them():
    """--model-size fills in the sizes of the paper's table (2023 configs.yaml: deter, hidden, CNN depth, MLP units and
    layers), and a size flag given on the command line wins over its preset."""
    table = {"XS": (256, 256, 24, 256, 1), "S": (512, 512, 32, 512, 2), "M": (1024, 640, 48, 640, 3),
             "L": (2048, 768, 64, 768, 4), "XL": (4096, 1024, 96, 1024, 5)}  # fmt: skip
    keys = ("deter_size", "hidden_size", "cnn_depth", "mlp_units", "mlp_layers")
    for size, values in table.items():
        args = v3.Args(model_size=size)
        v3.check_args(args)
        assert tuple(getattr(args, k) for k in keys) == values, size
    assert v3.Args().model_size == "S"  # the Atari100k size
    args = v3.Args(model_size="XS", deter_size=512, cnn_depth=16)
    v3.check_args(args)
    assert tuple(getattr(args, k) for k in keys) == (512, 256, 16, 256, 1)
