"""docs/forking.md's worked example (an actor entropy that decays) is code that runs: the whole change, shown there as one
```diff block, applies to a copy of dreamer_v3_atari.py; each snippet of the example's numbered steps is part of that
change; and the patched copy trains on Catch with the decay on (a few gradient steps at tiny sizes, well under a minute
of CPU). An example that the scripts have moved away from fails here instead of in a reader's hands."""

import re
import textwrap
from pathlib import Path

import pytest

from tests.helpers import CATCH, ROOT, assert_ok, run

pytest.importorskip("tensorboard")

DOC = ROOT / "docs" / "forking.md"
SECTION = "## An example: an actor entropy that decays"
SCRIPT = "dreamer_v3_atari.py"  # the script the example changes (the original: the doc speaks of it, not of a fork)
# Tiny sizes on Catch: training starts at policy step 256 and takes (300 - 256) x 0.5 = 22 gradient steps, over which the
# entropy scale decays from 1e-2 to 1e-3 in 10.
FLAGS = (
    f"--env-id {CATCH} --no-cuda --total-timesteps 300 --learning-starts 256 --replay-ratio 0.5 --batch-size 4 "
    "--batch-length 16 --deter-size 16 --hidden-size 16 --cnn-depth 2 --mlp-units 16 --mlp-layers 1 --stoch-size 4 "
    "--classes 4 --imagination-horizon 5 --actor-entropy 1e-2 --actor-entropy-final 1e-3 --actor-entropy-decay 10 "
    "--eval-episodes 1 --video-every 0 --log-every 100"
)


def example() -> tuple:
    """(the diff, [the code snippets of the numbered steps]) of the example's section of docs/forking.md, dedented."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC.name} has no section {SECTION!r}"
    section = text[text.index(SECTION) + len(SECTION) :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    blocks = re.findall(r"^( *)```(\w+)\n(.*?)^\1```", section, re.M | re.S)
    diffs = [textwrap.dedent(body) for _, language, body in blocks if language == "diff"]
    assert len(diffs) == 1, f"the example must show its whole change as one ```diff block, found {len(diffs)}"
    first_diff = next(i for i, (_, language, _) in enumerate(blocks) if language == "diff")
    snippets = [textwrap.dedent(body) for _, language, body in blocks[:first_diff] if language == "python"]
    assert snippets, "the example's steps show no ```python snippet"
    return diffs[0], snippets


def hunks(diff: str) -> list:
    """[(old lines, new lines)] of each hunk of a one-file unified diff; an empty line is a blank context line (markdown
    drops the single space that starts it)."""
    files = re.findall(r"^--- a/(\S+)\n\+\+\+ b/(\S+)$", diff, re.M)
    assert files == [(SCRIPT, SCRIPT)], f"the diff must change {SCRIPT}, and it alone: {files}"
    out = []
    for hunk in re.split(r"^@@ [^\n]* @@[^\n]*\n", diff, flags=re.M)[1:]:
        lines = [line or " " for line in hunk.rstrip("\n").splitlines()]
        assert all(line[0] in " +-" for line in lines), hunk
        out.append(([line[1:] for line in lines if line[0] in " -"], [line[1:] for line in lines if line[0] in " +"]))
    assert out, "the diff has no hunk"
    return out


def apply(diff: str, text: str) -> str:
    """The text with the diff applied: each hunk's old lines must stand in it exactly once, as they are."""
    lines = text.splitlines()
    for old, new in hunks(diff):
        starts = [i for i in range(len(lines) - len(old) + 1) if lines[i : i + len(old)] == old]
        assert len(starts) == 1, f"a hunk of the example's diff matches {SCRIPT} {len(starts)} times, not once:\n" + (
            "\n".join(old)
        )
        lines[starts[0] : starts[0] + len(old)] = new
    return "\n".join(lines) + "\n"


def test_the_snippets_of_the_steps_are_part_of_the_diff():
    """Every line of every snippet is a line the diff adds or shows around its changes, at least one of them added, and
    the snippet stands in the patched script as shown (its lines in a row, indentation aside)."""
    diff, snippets = example()
    added = {line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")}
    shown = {line.strip() for old, new in hunks(diff) for line in old + new}
    patched = [line.strip() for line in apply(diff, (ROOT / SCRIPT).read_text()).splitlines()]
    for snippet in snippets:
        lines = [line.strip() for line in snippet.splitlines() if line.strip()]
        missing = [line for line in lines if line not in shown]
        assert not missing, "snippet lines that the diff does not show:\n" + "\n".join(missing)
        assert any(line in added for line in lines), "a snippet with no line that the diff adds:\n" + snippet
        assert any(patched[i : i + len(lines)] == lines for i in range(len(patched))), (
            "a snippet that does not stand in the patched script as shown:\n" + snippet
        )


def test_the_patched_script_trains_with_the_decay(tmp_path: Path):
    diff, _ = example()
    copy = tmp_path / SCRIPT
    copy.write_text(apply(diff, (ROOT / SCRIPT).read_text()))
    result = run(copy, FLAGS, tmp_path / "run", timeout=300)
    assert_ok(result)
    steps = [int(n) for n in re.findall(r"\| gradient steps (\d+) \|", result.stdout)]
    assert steps and steps[-1] >= 10, result.stdout[-2000:]  # trained through the whole decay
