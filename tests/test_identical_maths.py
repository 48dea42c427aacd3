r"""Speed work must not change what is learned: for every script, the losses and gradients of one gradient step match a
straightforward reference computation on the same batch and weights, in fp32, to a tight tolerance.

The scripts' `RSSM.observe` is arranged for speed (the embedding's share of the posterior's first layer runs on all
T x B rows before the loop, the prior's output layers after it). The reference filters the sequence the textbook way,
calling `obs_step` (which concatenates h_t and e_t and runs every layer) at each step and stacking its posteriors and
priors. The random draws (Gumbel noise of the categorical samples, Gaussian noise of V1's latents, V2-DMC's uniform
draws) are replaced by a fixed function of the tensor's shape, so both computations sample the same latents. Both run
the script's own `train_step`, the function its training loop calls, with optimizers that record the gradients they
are given instead of stepping. Then the world model loss, every world model gradient, and the actor and critic losses
and gradients of the imagination that starts from those posteriors are compared; V2's and V3's actor losses reuse the
log-probabilities the imagination computed (V2-DMC its mean and std), where the reference runs the actor again on the
imagined states. Also here: `train_step` never waits for the device, and `NonFinite` names the first blow-up.

Forks: DREAMER_V1, DREAMER_V2, DREAMER_V3 or DREAMER_V2_DMC names a file to test in place of the script (a path relative
to the repo root, or an absolute one; tests/helpers.py). A fork's new flags get cases of their own: DREAMER_V3_MATHS_ARGS
(DREAMER_V1_MATHS_ARGS, ...) holds flag sets separated by `;`, each a space-separated list of Args field=value (values
as Python literals, or else strings), and each set is one more case of test_gradient_step_matches_reference at SIZES
updated by it. For example

    DREAMER_V3=dreamer_v3_blockgru.py DREAMER_V3_MATHS_ARGS="gru_blocks=8; gru_blocks=2 deter_size=32" \
        pytest tests/test_identical_maths.py

adds the cases v3-gru_blocks=8 and v3-gru_blocks=2,deter_size=32. A field that the script's Args lacks fails its case."""

import ast
import copy
import dataclasses
import os

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import fork_variable, load_script

MODULES = {name: load_script(name) for name in ("v1", "v2", "v3", "v2-dmc")}  # the originals, or the forks named

T, B, ACTIONS = 7, 3, 3
SIZES = dict(
    deter_size=24, hidden_size=20, cnn_depth=2, mlp_units=16, stoch_size=4, kl_free=0.0
)  # no free nats: every KL gradient flows


def literal(value: str):
    """`8` -> 8, `1e-4` -> 0.0001, `True` -> True, `XS` -> "XS"."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def extra_args(name: str) -> list:
    """The flag sets of DREAMER_<name>_MATHS_ARGS as dicts of Args overrides: "a=1 b=2; a=3" -> [{a: 1, b: 2}, {a: 3}]."""
    variable = fork_variable(name) + "_MATHS_ARGS"
    sets = []
    for flag_set in filter(str.strip, os.environ.get(variable, "").split(";")):
        overrides = {}
        for item in flag_set.split():
            key, equals, value = item.partition("=")
            if not (key.isidentifier() and equals and value):
                raise ValueError(f"{variable}: {item!r} is not field=value, as in {variable}='gru_blocks=8; gru_blocks=2'")
            overrides[key] = literal(value)
        sets.append(overrides)
    return sets


def cases() -> list:
    """(name, overrides) for every script at SIZES, then the extra flag sets, with ids like v3 and v3-gru_blocks=8."""
    plain = [pytest.param(name, {}, id=name) for name in MODULES]
    extra = [
        pytest.param(name, overrides, id=f"{name}-" + ",".join(f"{k}={v}" for k, v in overrides.items()))
        for name in MODULES
        for overrides in extra_args(name)
    ]
    return plain + extra


def fixed_noise(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Deterministic 'random' numbers in [low, high]: the same tensor shape always gets the same values."""
    pattern = (torch.cos(torch.arange(x.numel(), dtype=torch.float64) * 2.39996) + 1) / 2
    return (low + (high - low) * pattern).reshape(x.shape).to(x.dtype)


@pytest.fixture(autouse=True)
def no_randomness(monkeypatch):
    monkeypatch.setattr(torch, "rand_like", lambda x, **kw: fixed_noise(x, 0.01, 0.99))
    monkeypatch.setattr(torch, "randn_like", lambda x, **kw: fixed_noise(x, -2.0, 2.0))


def reference_observe(rssm, embed, prev_actions, is_first, state):
    """The textbook filter: one obs_step per time step, posteriors and priors stacked."""
    posts, priors = [], []
    for t in range(embed.shape[0]):
        state, prior = rssm.obs_step(state, prev_actions[t], embed[t], is_first[t])
        posts.append(state)
        priors.append(prior)
    post = {k: torch.stack([s[k] for s in posts]) for k in posts[0]}
    prior = {k: torch.stack([s[k] for s in priors]) for k in priors[0]}
    return post, prior


def setup(name: str, overrides: dict | None = None):
    """The script's module, Args at SIZES (updated by `overrides`), its networks as its main block builds them, a batch
    with resets and a terminal step, and the TBPTT carry."""
    torch.manual_seed(0)
    m = MODULES[name]
    if name == "v1":
        sizes = dict(SIZES, actor_layers=1, critic_layers=1, reward_layers=1, imagination_horizon=4)
    elif name == "v3":
        sizes = dict(SIZES, classes=5, mlp_layers=1, reward_bins=15, imagination_horizon=4)
    else:
        sizes = dict(SIZES, classes=5, mlp_layers=1, imagination_horizon=4)
    unknown = set(overrides or {}) - {field.name for field in dataclasses.fields(m.Args)}
    assert not unknown, f"{fork_variable(name)}_MATHS_ARGS: {m.__file__} has no Args field {sorted(unknown)}"
    args = m.Args(**{**sizes, **(overrides or {})})
    wm = m.WorldModel((3, 64, 64), ACTIONS, args)
    feat = args.deter_size + (args.stoch_size * args.classes if name != "v1" else args.stoch_size)
    if name == "v1":
        actor = m.Actor(feat, ACTIONS, args.mlp_units, args.actor_layers)
        critic = m.Critic(feat, args.mlp_units, args.critic_layers)
    elif name == "v3":
        actor = m.Actor(feat, ACTIONS, args.mlp_units, args.mlp_layers, args.unimix)
        critic = m.Critic(feat, args.reward_bins, args.mlp_units, args.mlp_layers)
    elif name == "v2-dmc":
        actor = m.Actor(feat, ACTIONS, args.mlp_units, args.mlp_layers, args.actor_min_std)
        critic = m.Critic(feat, args.mlp_units, args.mlp_layers)
    else:
        actor = m.Actor(feat, ACTIONS, args.mlp_units, args.mlp_layers)
        critic = m.Critic(feat, args.mlp_units, args.mlp_layers)
    for p in [*wm.parameters(), *actor.parameters(), *critic.parameters()]:
        if p.dim() > 1 and not p.any():  # zero-initialised output layers would leave the layers below without gradient
            p.data.normal_(0.0, 0.05)
    g = torch.Generator().manual_seed(1)
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0, 0] = is_first[3, 1] = True  # a reset at the start of a row and one in the middle
    is_terminal = torch.zeros(T, B, dtype=torch.bool)
    if name != "v2-dmc":
        is_terminal[2, 1] = True
    if name == "v2-dmc":
        action = torch.rand(T, B, ACTIONS, generator=g) * 2 - 1
    else:
        action = F.one_hot(torch.randint(0, ACTIONS, (T, B), generator=g), ACTIONS).float()
    batch = dict(
        obs=torch.randint(0, 256, (T, B, 3, 64, 64), generator=g, dtype=torch.uint8),
        action=action,
        reward=torch.randn(T, B, generator=g),
        is_first=is_first,
        is_terminal=is_terminal,
    )
    carry_state = {k: v.detach() + 0.1 * torch.randn(v.shape, generator=g) for k, v in wm.rssm.initial(B).items()}
    if name == "v1":
        carry_state["std"] = carry_state["std"].abs() + 0.1
    carry = (carry_state, action[0] * 0 + 0.3)
    return m, args, wm, actor, critic, batch, carry


def loss_scales(name, args) -> dict:
    """The loss scales each script's training loop passes."""
    if name == "v3":
        return {"image": 1.0, "reward": 1.0, "cont": 1.0, "dyn": args.dyn_scale, "rep": args.rep_scale}
    scales = {"image": 1.0, "reward": 1.0, "kl": args.kl_scale}
    if name != "v2-dmc":
        scales["discount"] = args.discount_scale
    return scales


def world_model_loss(name, m, args, wm, batch, carry):
    """The script's world_model_loss with the loss scales its training loop passes."""
    return m.world_model_loss(wm, batch, carry, loss_scales(name, args), args.kl_free if name == "v3" else args)


class RecordingOptimizer:
    """Stands in for an optimizer: step() records the gradients it would apply and changes no weight, so that every
    loss of the gradient step is computed from the same weights in both computations."""

    def __init__(self, module: torch.nn.Module):
        self.named, self.grads = list(module.named_parameters()), {}

    def zero_grad(self, set_to_none: bool = True):
        for _, p in self.named:
            p.grad = None

    def step(self):
        self.grads = {n: p.grad.clone() for n, p in self.named if p.grad is not None}


def train_step(name, m, args, wm, actor, critic, opts: list, batch, carry) -> tuple:
    """The script's train_step, called as its training loop calls it (a fresh target or slow critic and return
    normaliser, fp32, the first update): (carry, metrics, checks)."""
    target = copy.deepcopy(critic).requires_grad_(False)
    scales, autocast = loss_scales(name, args), torch.autocast("cpu", enabled=False)
    if name == "v1":
        return m.train_step(wm, actor, critic, *opts, batch, carry, scales, args, autocast)
    if name == "v3":
        norm = m.ReturnNorm(args.return_norm_decay, args.return_norm_limit)
        return m.train_step(wm, actor, critic, target, norm, *opts, batch, carry, scales, args, autocast)
    return m.train_step(wm, actor, critic, target, *opts, batch, carry, scales, args, autocast, 0)


def one_step(name, m, args, wm, actor, critic, batch, carry, reference: bool = False) -> dict:
    """Losses and gradients of one gradient step: the script's own train_step, with optimizers that record the
    gradients instead of stepping and clipping thresholds too high to act. With `reference`, the actor loss runs the
    actor again on the imagined states instead of reusing the imagination's outputs."""
    args = copy.copy(args)
    args.model_grad_clip = args.ac_grad_clip = 1e12
    opts = [RecordingOptimizer(module) for module in (wm, actor, critic)]
    with pytest.MonkeyPatch.context() as mp:
        if reference and name != "v1":
            imagine_with_actor = m.imagine_with_actor

            def imagine_then_rerun_actor(wm, actor, start, horizon):
                feats, actions, _ = imagine_with_actor(wm, actor, start, horizon)
                return feats, actions, actor(feats[:-1].detach())

            mp.setattr(m, "imagine_with_actor", imagine_then_rerun_actor)
        _, metrics, _ = train_step(name, m, args, wm, actor, critic, opts, batch, carry)
    out = {f"world model {k} loss": metrics[f"losses/{k}"] for k in loss_scales(name, args)}
    out.update({"actor loss": metrics["losses/actor"], "critic loss": metrics["losses/critic"]})
    for label, opt in zip(("world model", "actor", "critic"), opts):
        out.update({f"d {label} / {n}": g for n, g in opt.grads.items()})
    return out


def mismatches(fast: dict, reference: dict) -> list:
    """The keys whose values differ beyond a tight fp32 tolerance: 1e-4 relative, and absolute 1e-4 of the largest entry.
    (The two computations sum the same terms in different orders: the worst difference measured is 2.5e-5 of the
    largest entry, in V3's encoder LayerNorm bias, whose gradient sums over every pixel of every frame; a real change
    of the maths, like the missed reset below, differs by far more.)"""
    assert fast.keys() == reference.keys()
    bad = []
    for key, ref in reference.items():
        scale = ref.abs().max().item()
        if not torch.allclose(fast[key], ref, rtol=1e-4, atol=1e-4 * max(scale, 1e-3)):
            bad.append(f"{key}: largest difference {(fast[key] - ref).abs().max().item():.3g} (largest value {scale:.3g})")
    return bad


@pytest.mark.parametrize("name, overrides", cases())
def test_gradient_step_matches_reference(name, overrides, monkeypatch):
    m, args, wm, actor, critic, batch, carry = setup(name, overrides)
    fast = one_step(name, m, args, wm, actor, critic, batch, carry)
    monkeypatch.setattr(wm.rssm, "observe", lambda *a: reference_observe(wm.rssm, *a))
    reference = one_step(name, m, args, wm, actor, critic, batch, carry, reference=True)
    assert len([k for k in fast if k.startswith("d world model")]) >= 20, fast.keys()
    zeros = [k for k, v in reference.items() if not v.any() and "loss" not in k]
    assert not zeros, f"{name}: all-zero gradients compare equal whatever the code does: {zeros}"
    assert not mismatches(fast, reference), f"{name}: " + "\n".join(mismatches(fast, reference))


@pytest.mark.parametrize("name", ["v1", "v3"])
def test_reference_catches_a_changed_step(name, monkeypatch):
    """The comparison can fail: a filter that ignores is_first (no reset in the middle of a row) is caught."""
    m, args, wm, actor, critic, batch, carry = setup(name)
    fast = one_step(name, m, args, wm, actor, critic, batch, carry)
    no_reset = torch.zeros_like(batch["is_first"])
    monkeypatch.setattr(wm.rssm, "observe", lambda e, a, f, s: reference_observe(wm.rssm, e, a, no_reset, s))
    reference = one_step(name, m, args, wm, actor, critic, batch, carry, reference=True)
    assert len(mismatches(fast, reference)) > 10


@pytest.mark.parametrize("distributed", [False, True], ids=["one process", "process group"])
@pytest.mark.parametrize("name", ["v1", "v2", "v3", "v2-dmc"])
def test_fused_optimizer_step_matches_the_plain_one(name, distributed, tmp_path):
    """The scripts use fused Adam (AdamW for V2). It reads each gradient's memory as if laid out like its parameter, so
    a gradient in another layout (a transposed one from torch.autograd.grad, which V1 and V2-DMC write into .grad, or
    one rebuilt from the all-reduced flat vector for a channels_last convolution) must be copied into the parameter's
    layout first. Three world model steps through the script's backward_and_clip, with the encoder and decoder in
    channels_last as in the scripts, give the same weights as the unfused optimizer; also through the all-reduce path
    (a one-process gloo group)."""
    m, args, wm, actor, critic, batch, carry = setup(name)
    if distributed:
        torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        results = []
        for fused in (True, False):
            model = copy.deepcopy(wm)
            model.encoder.to(memory_format=torch.channels_last)
            model.decoder.to(memory_format=torch.channels_last)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
            for _ in range(3):
                loss = world_model_loss(name, m, args, model, batch, carry)[0]
                opt.zero_grad(set_to_none=True)
                m.backward_and_clip(loss, list(model.parameters()), 100.0)
                opt.step()
            results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    finally:
        if distributed:
            torch.distributed.destroy_process_group()
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["v1", "v2", "v3", "v2-dmc"])
def test_train_step_never_waits_for_the_device(name, monkeypatch):
    """The gradient step queues its work and returns: no tensor is turned into a Python value while it runs, so on a
    GPU the host can queue the next step while this one computes. Turning a tensor into a bool, a number or a list,
    or copying it to the host, raises here; the training loop's one wait per round of gradient steps is
    NonFinite.check."""
    m, args, wm, actor, critic, batch, carry = setup(name)
    opts = [torch.optim.Adam(module.parameters(), lr=1e-4, fused=True) for module in (wm, actor, critic)]
    nonfinite = m.NonFinite(0, torch.device("cpu"))

    def waits(*args, **kwargs):
        raise AssertionError("the gradient step waited for the device")

    with pytest.MonkeyPatch.context() as mp:
        for method in ("__bool__", "item", "cpu", "tolist", "numpy", "__int__", "__float__"):
            mp.setattr(torch.Tensor, method, waits)
        carry, metrics, checks = train_step(name, m, args, wm, actor, critic, opts, batch, carry)
        nonfinite.note(checks, policy_step=100, world_size=1)
    assert all(torch.isfinite(v).all() for v in metrics.values())
    nonfinite.check(None, "checkpoint.pt", "32")  # all finite: returns


@pytest.mark.parametrize("name", ["v1", "v3"])
def test_non_finite_is_named_at_its_first_gradient_step(name):
    """NonFinite remembers the first gradient step whose checks were not finite, and check() names it in one line."""
    m = MODULES[name]
    nonfinite = m.NonFinite(10, torch.device("cpu"))
    fine, bad = torch.tensor(1.0), torch.tensor(float("nan"))
    nonfinite.note({"image loss": fine, "actor loss": fine}, policy_step=500, world_size=2)  # gradient step 10
    nonfinite.note({"image loss": fine, "actor loss": bad}, policy_step=600, world_size=2)  # 12: the first blow-up
    nonfinite.note({"image loss": bad, "actor loss": bad}, policy_step=700, world_size=2)  # 14: later, not reported
    with pytest.raises(SystemExit, match=r"error: the actor loss became non-finite at gradient step 12 \(policy step 600\); "
                       r"the last checkpoint, from policy step 400, is runs/x/checkpoint\.pt; lower the learning rates or "
                       r"use --precision 32$"):  # fmt: skip
        nonfinite.check(400, "runs/x/checkpoint.pt", "bf16")
