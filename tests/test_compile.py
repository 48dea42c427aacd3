"""--compile: the compiled gradient step against the eager one, in fp32 at tiny sizes.

`compile_loss_fns` compiles the world model loss and the behaviour losses whole (fullgraph=True: a graph break is an
error, not a silent fallback), each with its backward pass, and returns the pair that train_step takes as `loss_fns`.
Compiled code draws other random numbers than eager code, so both runs draw the fixed 'random' numbers of
tests/test_identical_maths.py instead (the same arithmetic around them); everything else is the script's own code. Two
gradient steps with the Adam updates between them: the losses, the gradient norms and the updated weights must agree.
Slow: compiling takes minutes on a CPU.
"""

import copy

import pytest
import torch

from tests.test_identical_maths import loss_scales, no_randomness, setup  # noqa: F401 (no_randomness: autouse fixture)

SCRIPTS = ["v1", "v2", "v3", "v2-dmc"]  # the scripts whose --compile compiles the whole gradient step


def two_steps(name: str, m, args, nets, batch, carry, loss_fns=None) -> tuple:
    """Two gradient steps of the script's own train_step, as its training loop calls it, on copies of `nets`; with
    `loss_fns` as the loop passes them with --compile, else train_step's default (the eager functions)."""
    wm, actor, critic = (copy.deepcopy(n) for n in nets)
    target = copy.deepcopy(critic).requires_grad_(False)
    opts = [torch.optim.Adam(n.parameters(), lr=1e-3) for n in (wm, actor, critic)]
    scales, autocast, history = loss_scales(name, args), torch.autocast("cpu", enabled=False), []
    norm = m.ReturnNorm(args.return_norm_decay, args.return_norm_limit) if name == "v3" else None
    compiled = {} if loss_fns is None else dict(loss_fns=loss_fns)
    for updates in range(2):
        if name == "v1":
            carry, metrics, _ = m.train_step(wm, actor, critic, *opts, batch, carry, scales, args, autocast, **compiled)
        elif name == "v3":
            carry, metrics, _ = m.train_step(wm, actor, critic, target, norm, *opts, batch, carry, scales, args, autocast,
                                             **compiled)  # fmt: skip
        else:
            carry, metrics, _ = m.train_step(wm, actor, critic, target, *opts, batch, carry, scales, args, autocast,
                                             updates, **compiled)  # fmt: skip
        history.append({k: v.detach().clone() for k, v in metrics.items()})
    weights = {f"{i}.{k}": v.detach().clone() for i, n in enumerate((wm, actor, critic)) for k, v in n.state_dict().items()}
    return history, weights


@pytest.mark.parametrize("name", SCRIPTS)
def test_compiled_step_matches_eager(name):
    m, args, wm, actor, critic, batch, carry = setup(name, dict(imagination_horizon=3))
    eager_fns = (m.world_model_loss, m.behaviour_losses)
    eager, eager_weights = two_steps(name, m, args, (wm, actor, critic), batch, carry)
    torch._dynamo.reset()
    m.compile_loss_fns(torch.device("cpu"))  # a second call must compile the eager functions again, not wrap the first
    loss_fns = m.compile_loss_fns(torch.device("cpu"))
    assert (m.world_model_loss, m.behaviour_losses) == eager_fns  # the module's names are left alone
    assert tuple(fn._torchdynamo_orig_callable for fn in loss_fns) == eager_fns
    compiled, compiled_weights = two_steps(name, m, args, (wm, actor, critic), batch, carry, loss_fns)
    for step, (e, c) in enumerate(zip(eager, compiled)):
        for key in e:
            torch.testing.assert_close(c[key], e[key], rtol=1e-4, atol=1e-5, msg=lambda s: f"step {step} {key}: {s}")
    for key in eager_weights:
        torch.testing.assert_close(compiled_weights[key], eager_weights[key], rtol=1e-4, atol=1e-5,
                                   msg=lambda s: f"weight {key}: {s}")  # fmt: skip
