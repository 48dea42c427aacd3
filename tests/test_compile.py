"""--compile: the compiled gradient step against the eager one, in fp32 at tiny sizes.

`compile_gradient_step` compiles the world model loss and the behaviour losses whole (fullgraph=True: a graph break is an
error, not a silent fallback), each with its backward pass. Compiled code draws other random numbers than eager code, so
both runs draw the fixed 'random' numbers of tests/test_identical_maths.py instead (the same arithmetic around them);
everything else is the script's own code. Two gradient steps with the Adam updates between them: the losses, the
gradient norms and the updated weights must agree. Slow: compiling takes minutes on a CPU.
"""

import copy

import pytest
import torch

from tests.test_identical_maths import loss_scales, no_randomness, setup  # noqa: F401 (no_randomness: autouse fixture)

SCRIPTS = ["v1", "v2", "v3", "v2-dmc"]  # the scripts whose --compile compiles the whole gradient step


def two_steps(name: str, m, args, nets, batch, carry) -> tuple:
    """Two gradient steps of the script's own train_step, as its training loop calls it, on copies of `nets`."""
    wm, actor, critic = (copy.deepcopy(n) for n in nets)
    target = copy.deepcopy(critic).requires_grad_(False)
    opts = [torch.optim.Adam(n.parameters(), lr=1e-3) for n in (wm, actor, critic)]
    scales, autocast, history = loss_scales(name, args), torch.autocast("cpu", enabled=False), []
    norm = m.ReturnNorm(args.return_norm_decay, args.return_norm_limit) if name == "v3" else None
    for updates in range(2):
        if name == "v1":
            carry, metrics, _ = m.train_step(wm, actor, critic, *opts, batch, carry, scales, args, autocast)
        elif name == "v3":
            carry, metrics, _ = m.train_step(wm, actor, critic, target, norm, *opts, batch, carry, scales, args, autocast)
        else:
            carry, metrics, _ = m.train_step(wm, actor, critic, target, *opts, batch, carry, scales, args, autocast,
                                             updates)  # fmt: skip
        history.append({k: v.detach().clone() for k, v in metrics.items()})
    weights = {f"{i}.{k}": v.detach().clone() for i, n in enumerate((wm, actor, critic)) for k, v in n.state_dict().items()}
    return history, weights


@pytest.mark.parametrize("name", SCRIPTS)
def test_compiled_step_matches_eager(name, monkeypatch):
    m, args, wm, actor, critic, batch, carry = setup(name, dict(imagination_horizon=3))
    for function in ("world_model_loss", "behaviour_losses"):  # restored when the test ends
        monkeypatch.setattr(m, function, getattr(m, function))
    eager, eager_weights = two_steps(name, m, args, (wm, actor, critic), batch, carry)
    torch._dynamo.reset()
    m.compile_gradient_step(torch.device("cpu"))
    assert hasattr(m.world_model_loss, "_torchdynamo_orig_callable")
    compiled, compiled_weights = two_steps(name, m, args, (wm, actor, critic), batch, carry)
    for step, (e, c) in enumerate(zip(eager, compiled)):
        for key in e:
            torch.testing.assert_close(c[key], e[key], rtol=1e-4, atol=1e-5, msg=lambda s: f"step {step} {key}: {s}")
    for key in eager_weights:
        torch.testing.assert_close(compiled_weights[key], eager_weights[key], rtol=1e-4, atol=1e-5,
                                   msg=lambda s: f"weight {key}: {s}")  # fmt: skip
