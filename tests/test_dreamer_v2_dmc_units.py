"""Unit tests of the parts of dreamer_v2_dmc.py that continuous control adds to dreamer_v2_atari.py: the truncated normal
actor (sample range, log-probability, entropy, reparameterised gradients), dynamics backpropagation (the actor's gradient
reaches the actor through the imagined states, and changes neither the world model nor the critic), action
normalisation, the DMC wrapper (action repeat with one render per policy step, truncation at the time limit) and the
env ids."""

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.helpers import load_script

dmc = load_script("v2-dmc")  # dreamer_v2_dmc.py, or the fork that DREAMER_V2_DMC names

TINY = dict(deter_size=16, hidden_size=16, cnn_depth=2, mlp_units=16, mlp_layers=1, stoch_size=3, classes=4)
CASES = [(0.0, 1.0), (0.9, 0.1), (-0.95, 0.3), (0.5, 2.1), (0.99, 0.1), (-0.3, 0.5)]  # (mean, std) pairs


def trunc_normal(mean: float, std: float, n: int = 1) -> dmc.TruncNormal:
    return dmc.TruncNormal(torch.full((n, 1), mean), torch.full((n, 1), std))


def density(mean: float, std: float, points: int = 200_001) -> tuple:
    grid = torch.linspace(-1, 1, points, dtype=torch.float64)
    return grid, trunc_normal(mean, std).log_prob(grid.float()[:, None, None]).double().squeeze(-1).exp()


# ---------------------------------------------------------------- the truncated normal


@pytest.mark.parametrize("mean,std", CASES)
def test_trunc_normal_samples_lie_inside_the_bounds(mean: float, std: float):
    torch.manual_seed(0)
    x = trunc_normal(mean, std, 100_000).sample()
    assert x.min() >= -1 + 1e-6 - 1e-7 and x.max() <= 1 - 1e-6 + 1e-7
    assert torch.isfinite(x).all()


@pytest.mark.parametrize("mean,std", CASES)
def test_trunc_normal_log_prob_is_a_density_on_the_interval(mean: float, std: float):
    """exp(log_prob) integrates to 1 over [-1, 1], and it is the normal density renormalised by Z = Phi(b) - Phi(a)."""
    grid, p = density(mean, std)
    torch.testing.assert_close(torch.trapezoid(p, grid).item(), 1.0, atol=1e-4, rtol=0)
    normal = torch.distributions.Normal(torch.tensor(mean, dtype=torch.float64), std)
    Z = normal.cdf(torch.tensor(1.0, dtype=torch.float64)) - normal.cdf(torch.tensor(-1.0, dtype=torch.float64))
    torch.testing.assert_close(p[::1000], (normal.log_prob(grid[::1000]) - Z.log()).exp(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mean,std", CASES)
def test_trunc_normal_samples_follow_the_density(mean: float, std: float):
    """The empirical distribution function of 200k samples is within 0.005 of the integrated density (Kolmogorov-Smirnov
    distance; its 99.9% quantile for 200k samples is about 0.0044), and the sample mean is the analytic mean."""
    torch.manual_seed(1)
    x = trunc_normal(mean, std, 200_000).sample().double().flatten().sort().values
    grid, p = density(mean, std)
    cdf = torch.cumulative_trapezoid(p, grid)
    cdf = torch.cat([torch.zeros(1, dtype=cdf.dtype), cdf]) / cdf[-1]
    empirical = torch.searchsorted(x, grid, right=True).double() / len(x)
    assert (empirical - cdf).abs().max() < 0.005
    torch.testing.assert_close(x.mean().item(), torch.trapezoid(grid * p, grid).item(), atol=0.005, rtol=0)


@pytest.mark.parametrize("mean,std", CASES)
def test_trunc_normal_entropy_matches_a_monte_carlo_estimate(mean: float, std: float):
    """The analytic entropy against -mean log_prob of 200k samples (within 4 standard errors of that estimate) and against
    a numerical integral of -p log p."""
    torch.manual_seed(2)
    dist = trunc_normal(mean, std, 200_000)
    log_p = dist.log_prob(dist.sample()).double()
    estimate, stderr = -log_p.mean().item(), log_p.std().item() / math.sqrt(len(log_p))
    analytic = dist.entropy()[0].item()
    assert abs(analytic - estimate) < 4 * stderr + 1e-4, (analytic, estimate, stderr)
    grid, p = density(mean, std)
    torch.testing.assert_close(analytic, torch.trapezoid(-p * p.log(), grid).item(), atol=1e-4, rtol=0)


def test_trunc_normal_entropy_sums_over_action_dimensions_and_standard_normal_limit():
    dist = dmc.TruncNormal(torch.zeros(3, 4), torch.full((3, 4), 0.01))  # far inside the bounds: an untruncated normal
    torch.testing.assert_close(dist.entropy(), torch.full((3,), 4 * (0.5 * math.log(2 * math.pi * math.e) + math.log(0.01))))
    torch.testing.assert_close(
        dist.log_prob(torch.zeros(3, 4)), torch.full((3,), 4 * (-0.5 * math.log(2 * math.pi) - math.log(0.01)))
    )


def test_trunc_normal_sample_is_reparameterised():
    """d E[x] / d mean and d E[x] / d std from the samples' gradients match the derivative of the analytic mean
    mean + std (phi(alpha) - phi(beta)) / Z; the clip into [low + 1e-6, high - 1e-6] passes gradients straight through."""
    torch.manual_seed(3)
    for mean0, std0 in [(0.5, 0.7), (-0.8, 0.3)]:
        mean, std = torch.tensor(mean0, requires_grad=True), torch.tensor(std0, requires_grad=True)
        x = dmc.TruncNormal(mean.expand(400_000, 1), std.expand(400_000, 1)).sample()
        sampled = torch.autograd.grad(x.mean(), [mean, std])
        m, s = (
            torch.tensor(mean0, dtype=torch.float64, requires_grad=True),
            torch.tensor(std0, dtype=torch.float64, requires_grad=True),
        )
        normal = torch.distributions.Normal(0.0, 1.0)
        a, b = (-1 - m) / s, (1 - m) / s
        analytic_mean = m + s * (normal.log_prob(a).exp() - normal.log_prob(b).exp()) / (normal.cdf(b) - normal.cdf(a))
        expected = torch.autograd.grad(analytic_mean, [m, s])
        for ours, theirs in zip(sampled, expected):
            torch.testing.assert_close(ours.item(), theirs.item(), atol=0.01, rtol=0)
    # the clip (here a wide one, into [-0.5, 0.5]) changes the values but passes the gradients of the unclipped sample
    mean = torch.full((1000, 1), 0.9, requires_grad=True)
    grads = []
    for clip in (0.5, 0.0):
        torch.manual_seed(4)
        x = dmc.TruncNormal(mean, torch.full((1000, 1), 0.1), clip=clip).sample()
        grads.append(torch.autograd.grad(x.sum(), mean)[0])
        assert (x.max() <= 0.5) == (clip == 0.5)
    torch.testing.assert_close(grads[0], grads[1])


def test_actor_mean_and_std_ranges():
    """mean = tanh(mu) in (-1, 1); std = 2 sigmoid(sigma / 2) + min_std in (min_std, 2 + min_std); mode = mean."""
    torch.manual_seed(4)
    actor = dmc.Actor(8, 3, 16, 1, min_std=0.1)
    mean, std = actor(100 * torch.randn(1000, 8))
    assert mean.abs().max() <= 1 and std.min() >= 0.1 and std.max() <= 2.1
    assert mean.abs().max() > 0.99 and std.min() < 0.11 and std.max() > 2.09  # the extremes are reached
    torch.testing.assert_close(dmc.TruncNormal(mean, std).mode(), mean)


# ---------------------------------------------------------------- dynamics backpropagation


def tiny_setup(**overrides):
    args = dmc.Args(**TINY, imagination_horizon=5, **overrides)
    torch.manual_seed(0)
    wm = dmc.WorldModel((3, 64, 64), 2, args)
    feat_size = args.deter_size + args.stoch_size * args.classes
    actor, critic = dmc.Actor(feat_size, 2, 16, 1), dmc.Critic(feat_size, 16, 1)
    target = copy.deepcopy(critic).requires_grad_(False)
    with torch.no_grad():  # a reward head and a target critic with clear slopes, so that the actions matter
        wm.reward.out.weight.normal_()
        target.net.out.weight.normal_()
    start = {k: torch.randn_like(v) for k, v in wm.rssm.initial(6).items()}
    start["stoch"] = torch.nn.functional.one_hot(torch.randint(0, args.classes, (6, args.stoch_size)), args.classes).float()
    return args, wm, actor, critic, target, start


def test_dynamics_backprop_reaches_the_actor_and_not_the_world_model():
    """With no entropy bonus the actor's input is detached and its loss depends on its parameters only through the sampled
    actions, the imagined states they lead to, the reward head and the target critic: a non-zero actor gradient is a
    gradient through the imagined dynamics. backward_and_clip writes it into the actor alone; the world model, the
    critic and the target critic keep no gradient and do not change when the actor steps."""
    args, wm, actor, critic, target, start = tiny_setup(actor_entropy=0.0)
    feats, actions, policy = dmc.imagine_with_actor(wm, actor, start, args.imagination_horizon)
    assert feats.shape == (6, 6, 16 + 12) and actions.shape == policy[0].shape == policy[1].shape == (5, 6, 2)
    assert feats.requires_grad and actions.requires_grad  # the graph is kept through imagination
    actor_loss, critic_loss, metrics = dmc.actor_critic_loss(
        wm, critic, target, feats, actions, policy, torch.full((6,), 0.99), args
    )
    before = {k: v.clone() for k, v in wm.state_dict().items()}
    opt = torch.optim.Adam(actor.parameters(), lr=0.1)
    norm = dmc.backward_and_clip(actor_loss, list(actor.parameters()), 100.0)
    assert norm > 0 and all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.net.parameters())
    assert all(p.grad is None for m in (wm, critic, target) for p in m.parameters())
    opt.step()
    assert all(torch.equal(v, before[k]) for k, v in wm.state_dict().items())
    # the critic's loss does not reach the actor or the world model (its input and its targets are detached)
    grads = torch.autograd.grad(critic_loss, list(actor.parameters()) + list(wm.parameters()), allow_unused=True)
    assert all(g is None for g in grads)
    # with the sampled actions detached inside the imagination (the only path from the actor's weights into the
    # imagined states), the same loss gives the actor nothing: the gradient above came through the dynamics
    original = dmc.TruncNormal.sample
    dmc.TruncNormal.sample = lambda self: original(self).detach()
    try:
        feats_cut, actions_cut, policy_cut = dmc.imagine_with_actor(wm, actor, start, args.imagination_horizon)
    finally:
        dmc.TruncNormal.sample = original
    actor_loss_cut, _, _ = dmc.actor_critic_loss(
        wm, critic, target, feats_cut, actions_cut, policy_cut, torch.full((6,), 0.99), args
    )
    cut = torch.autograd.grad(actor_loss_cut, list(actor.parameters()), allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in cut)


def test_one_backward_pass_gives_the_actor_and_the_critic_their_own_gradients_and_the_world_model_none():
    """train_step takes the actor's and the critic's gradients in one pass through actor_loss + critic_loss (compiled,
    both losses are one graph, walked backwards once). Their parameters are disjoint, so each gets exactly its own loss's
    gradient, and the world model's .grad, which holds the world model loss's gradient by then, keeps it: the actor's
    gradient passes through the world model but is not written there."""
    args, wm, actor, critic, target, start = tiny_setup()
    post = {k: v[None] for k, v in start.items()}  # [T = 1, B = 6]
    batch = dict(is_terminal=torch.zeros(1, 6, dtype=torch.bool))
    actor_loss, critic_loss, _ = dmc.behaviour_losses(wm, actor, critic, target, post, batch, args)
    actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
    alone = torch.autograd.grad(actor_loss, actor_params, retain_graph=True) + torch.autograd.grad(
        critic_loss, critic_params, retain_graph=True
    )
    wm_grads = [torch.randn_like(p) for p in wm.parameters()]  # stands for the world model loss's gradient
    for p, g in zip(wm.parameters(), wm_grads):
        p.grad = g.clone()
    dmc.backward(actor_loss + critic_loss, actor_params + critic_params)
    assert all(torch.equal(p.grad, g) for p, g in zip(actor_params + critic_params, alone))
    assert all(torch.equal(p.grad, g) for p, g in zip(wm.parameters(), wm_grads))
    assert all(p.grad is None for p in target.parameters())


def test_actor_loss_uses_returns_from_the_second_step_and_the_entropy_bonus():
    """actor loss = -mean over t < H - 1 of gamma^t (R_{t+1} + eta H_t): check it against the metrics' pieces."""
    args, wm, actor, critic, target, start = tiny_setup(actor_entropy=0.5, gamma=0.9)
    torch.manual_seed(5)
    feats, actions, policy = dmc.imagine_with_actor(wm, actor, start, args.imagination_horizon)
    actor_loss, _, metrics = dmc.actor_critic_loss(wm, critic, target, feats, actions, policy, torch.full((6,), 0.9), args)
    reward = wm.reward(feats[:-1]).squeeze(-1)
    discount = torch.full_like(reward, 0.9)
    returns = dmc.lambda_returns(reward, target(feats), discount, args.lmbda)
    weight = 0.9 ** torch.arange(args.imagination_horizon, dtype=torch.float32)[:, None]
    entropy = dmc.TruncNormal(*actor(feats[:-2])).entropy()
    expected = -((returns[1:] + 0.5 * entropy) * weight[:-1]).mean()
    torch.testing.assert_close(actor_loss, expected)
    torch.testing.assert_close(metrics["actor_entropy"], entropy.mean().detach())


# ---------------------------------------------------------------- action normalisation and the env


class BoxPixels(gym.Env):
    """64x64 frames, a Box action space with uneven bounds and one unbounded dimension; step records the action."""

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Box(np.array([0.0, -2.0, -np.inf], np.float32), np.array([4.0, 2.0, np.inf], np.float32))

    def reset(self, *, seed=None, options=None):
        return np.zeros((64, 64, 3), np.uint8), {}

    def step(self, action):
        self.last = action
        return np.zeros((64, 64, 3), np.uint8), 0.0, False, False, {}


def test_action_normalisation():
    """The agent acts in [-1, 1]: -1 is the env's low bound, +1 its high bound, 0 the middle; unbounded dims pass."""
    env = dmc.NormalizeAction(BoxPixels())
    assert np.array_equal(env.action_space.low[:2], [-1, -1]) and np.array_equal(env.action_space.high[:2], [1, 1])
    assert env.action_space.low[2] == -np.inf and env.action_space.high[2] == np.inf
    env.reset()
    for action, expected in [([-1, -1, 5], [0, -2, 5]), ([1, 1, -7], [4, 2, -7]), ([0, 0.5, 0], [2, 1, 0])]:
        env.step(np.array(action, np.float32))
        np.testing.assert_allclose(env.unwrapped.last, expected)


def test_dmc_wrapper_repeats_actions_renders_once_per_step_and_truncates():
    """cartpole-swingup at action repeat 8: every policy step advances 8 control steps and renders one 64x64 frame; the
    episode (1000 control steps) ends after 125 policy steps with truncated=True, never terminated. The action space is
    normalised to [-1, 1] and the observation is a contiguous uint8 RGB frame."""
    env = dmc.make_env("cartpole-swingup", 0, 1, False, "", action_repeat=8)()
    inner = env.unwrapped
    assert isinstance(inner, dmc.DMC) and inner.camera == 0
    assert env.action_space == gym.spaces.Box(-1, 1, (1,), np.float32)
    renders = []
    render = inner.env.physics.render
    inner.env.physics.render = lambda *a, **k: renders.append(1) or render(*a, **k)
    obs, _ = env.reset(seed=3)
    assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8 and obs.flags["C_CONTIGUOUS"] and obs.std() > 0
    steps, total, done = 0, 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(np.ones(1, np.float32))
        steps, total, done = steps + 1, total + reward, terminated or truncated
        assert not terminated
        if steps == 1:
            assert inner.env.physics.time() == pytest.approx(8 * inner.env.control_timestep())
    assert steps == 125 and truncated and len(renders) == 1 + 125 and 0 <= total <= 1000
    env.close()


def test_dmc_reset_seed_fixes_the_initial_state():
    env = dmc.make_env("walker-walk", 0, 1, False, "")()
    first = [env.reset(seed=s)[0] for s in (7, 7, 8)]
    assert np.array_equal(first[0], first[1]) and not np.array_equal(first[0], first[2])
    env.close()


PAPER_TASKS = (  # the tasks of the paper's DMC results (danijar/dreamerv2 scores/dmc-vision-dreamerv2.json)
    "acrobot-swingup cartpole-balance cartpole-balance_sparse cartpole-swingup cartpole-swingup_sparse cheetah-run "
    "cup-catch finger-spin finger-turn_easy finger-turn_hard hopper-hop hopper-stand pendulum-swingup quadruped-run "
    "quadruped-walk reacher-easy reacher-hard walker-run walker-stand walker-walk"
).split()


def test_env_ids():
    dmc.default_renderer()  # before the first import of dm_control, which fixes its OpenGL back end
    from dm_control import suite

    assert dmc.dmc_task("walker-walk") == ("walker", "walk")
    assert dmc.dmc_task("dm_control/walker-walk-v0") == ("walker", "walk")
    assert dmc.dmc_task("cup-catch") == dmc.dmc_task("ball_in_cup-catch") == ("ball_in_cup", "catch")
    assert dmc.dmc_task("dm_control/cartpole-balance_sparse-v0") == ("cartpole", "balance_sparse")
    for other in ("CartPole-v1", "tests.dot_env:Dot-v0", "ALE/Pong-v5"):
        assert dmc.dmc_task(other) is None
    for env_id in PAPER_TASKS:
        assert dmc.dmc_task(env_id) in suite.ALL_TASKS, env_id
        assert dmc.dmc_task(f"dm_control/{env_id}-v0") == dmc.dmc_task(env_id)
    env = dmc.make_env("quadruped-walk", 0, 1, False, "")()
    assert env.unwrapped.camera == 2 and env.action_space.shape == (12,)  # the paper's camera for quadruped
    env.close()


def test_defaults_are_the_papers_dmc_recipe():
    """danijar/dreamerv2 configs.yaml, dmc_vision over the defaults."""
    args = dmc.Args()
    assert args.env_id == "walker-walk" and args.action_repeat == 2 and args.camera == -1
    assert (args.deter_size, args.hidden_size, args.stoch_size, args.classes, args.cnn_depth) == (200, 200, 32, 32, 48)
    assert (args.mlp_units, args.mlp_layers) == (400, 4)
    assert (args.kl_balance, args.kl_free, args.kl_scale, args.reward_transform) == (0.8, 1.0, 1.0, "identity")
    assert (args.model_lr, args.actor_lr, args.critic_lr) == (3e-4, 8e-5, 8e-5)
    assert (args.model_eps, args.ac_eps, args.model_grad_clip, args.ac_grad_clip, args.weight_decay) == (
        1e-5,
        1e-5,
        100,
        100,
        1e-6,
    )
    assert (args.gamma, args.lmbda, args.imagination_horizon, args.actor_entropy, args.actor_min_std) == (
        0.99,
        0.95,
        15,
        1e-4,
        0.1,
    )
    assert (args.target_update_every, args.target_update_fraction) == (100, 1.0)
    assert (args.batch_size, args.batch_length, args.learning_starts, args.pretrain) == (16, 50, 1000, 100)
    assert args.replay_ratio == 0.2 and args.replay_ratio * args.batch_size * args.batch_length == pytest.approx(160)
    assert args.eval_every == 10_000 and args.eval_greedy


def test_compile_under_torchrun_is_refused_with_one_line():
    """--compile has not been tried under torchrun: the flag check stops the pair with one line, as in
    dreamer_v3_atari.py."""
    dmc.check_args(dmc.Args(compile=True))  # one process: accepted
    with pytest.raises(SystemExit, match=r"error: --compile does not run under torchrun yet; drop --compile, or train in "
                       r"one process$"):  # fmt: skip
        dmc.check_args(dmc.Args(compile=True, world_size=2))
