"""A fork is safe by default: copy a script, set one environment variable, and its unit, run and identical-maths tests
test the copy. DREAMER_V1, DREAMER_V2, DREAMER_V3 and DREAMER_V2_DMC each name the file to test in place of the original
(relative to the repo root, or absolute; tests/helpers.py's script_path and load_script), and DREAMER_V3_MATHS_ARGS (and
the others) add flag sets to the identical-maths test (tests/test_identical_maths.py). How to use them: docs/forking.md.

The main test here runs those tests on byte-for-byte copies of the four scripts under other names in a temporary folder;
the others check the look-up itself."""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from tests import helpers
from tests.helpers import ROOT, SCRIPTS, load_script, script_path

UNITS = {"v1": "test_dreamer_v1_units.py", "v2": "test_dreamer_v2_units.py", "v3": "test_dreamer_v3_units.py",
         "v2-dmc": "test_dreamer_v2_dmc_units.py"}  # fmt: skip
RUNS = {"v1": "test_dreamer_v1_runs.py", "v2": "test_dreamer_v2_runs.py", "v3": "test_dreamer_v3_runs.py",
        "v2-dmc": "test_dreamer_v2_dmc_runs.py"}  # fmt: skip
NON_FINITE = {"v1": "test_non_finite_loss_stops_with_a_checkpoint_from_before",
              "v2": "test_non_finite_loss_stops_with_a_checkpoint_from_before",
              "v3": "test_non_finite_loss_stops_with_a_checkpoint",
              "v2-dmc": "test_non_finite_loss_stops_with_a_checkpoint_from_before"}  # fmt: skip
MATHS_ARGS = "classes=8 mlp_layers=2"  # an extra identical-maths case for the copy of V3, at sizes the plain case lacks
# pytest in a subprocess, then the file of every script module it imported: the tests must import the copies only
RUNNER = """
import json, sys
import pytest
code = pytest.main(sys.argv[1:])
modules = {name: m.__file__ for name, m in list(sys.modules.items()) if "." not in name and name.endswith(("_atari", "_dmc"))}
print("script modules:", json.dumps(modules))
sys.exit(code)
"""


def test_copies_pass_the_tests_of_their_scripts(tmp_path: Path):
    """Copies of the four scripts (of the files under test, so of a fork when one is named) as my_<script>.py in a
    temporary folder, and one pytest subprocess with DREAMER_V1, DREAMER_V2, DREAMER_V3 and DREAMER_V2_DMC naming them
    (absolute paths; the copies import ratio.py from the repo root, which the tests put on PYTHONPATH).

    What it runs: every unit test of the four scripts and every identical-maths test, plus one extra maths case for V3
    from DREAMER_V3_MATHS_ARGS; from each script's run tests two: the non-finite-loss run (the one short training run:
    a few gradient steps with --model-lr 1e30, a checkpoint that records the copy's file name, and one error line that
    starts with it) and the bad-input case resume_other_script (a refused checkpoint of another script: one error line,
    no runs/). The other run tests take minutes each and test the same plumbing under the same name, so they stay out.
    Measured: 135 tests in 85-115 s of CPU time, most of it the unit and maths tests (3.5-5 minutes of wall time on the
    project's 2-core CPU, which four training runs were sharing).

    It fails if any of those tests fails, errors or is skipped, if one of them was not run, or if the tests imported an
    original script instead of its copy."""
    pytest.importorskip("ale_py")
    pytest.importorskip("tensorboard")
    copies = {name: tmp_path / "scripts" / f"my_{SCRIPTS[name]}" for name in SCRIPTS}
    (tmp_path / "scripts").mkdir()
    for name, copy in copies.items():
        shutil.copyfile(script_path(name), copy)
    selected = [f"tests/{UNITS[name]}" for name in SCRIPTS] + ["tests/test_identical_maths.py"]
    for name in SCRIPTS:
        selected += [f"tests/{RUNS[name]}::{NON_FINITE[name]}", f"tests/{RUNS[name]}::test_bad_input[resume_other_script]"]
    variables = {helpers.fork_variable(name): str(copy) for name, copy in copies.items()}
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, "-o", "addopts=", "-p", "no:cacheprovider", "-q", f"--basetemp={tmp_path / 'basetemp'}",
         f"--junitxml={report}", *selected],
        cwd=ROOT, env=dict(os.environ, **variables, DREAMER_V3_MATHS_ARGS=MATHS_ARGS), capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    output = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, output

    suite = ET.parse(report).getroot().find("testsuite")
    counts = {key: int(suite.get(key)) for key in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] >= 120 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, output)
    assert f"{counts['tests']} passed in " in result.stdout, output  # the summary line: all passed, nothing else
    ran = {(case.get("classname"), case.get("name")) for case in suite.iter("testcase")}
    for name in SCRIPTS:  # every file contributed, and each selected run test ran
        assert any(classname == f"tests.{UNITS[name][:-3]}" for classname, _ in ran), name
        assert (f"tests.{RUNS[name][:-3]}", NON_FINITE[name]) in ran, name
        assert (f"tests.{RUNS[name][:-3]}", "test_bad_input[resume_other_script]") in ran, name
    extra = "test_gradient_step_matches_reference[v3-classes=8,mlp_layers=2]"
    assert ("tests.test_identical_maths", extra) in ran, sorted(case for _, case in ran if "matches_reference" in case)

    # the copies were what got tested: imported in the tests' process under their own names, no original beside them
    modules = json.loads(result.stdout.split("script modules:")[-1])
    assert modules == {copy.stem: str(copy) for copy in copies.values()}, modules
    # and run: each run test's checkpoint records the copy's file name
    checkpoints = sorted((tmp_path / "basetemp").rglob("checkpoint.pt"))
    recorded = {torch.load(path, weights_only=False)["script"] for path in checkpoints}
    assert recorded == {copy.name for copy in copies.values()}, recorded


def test_script_path_follows_the_variable(tmp_path: Path, monkeypatch):
    """Unset: the original. Relative: from the repo root, whatever the working directory. Absolute: as given. A path
    that is not a .py file: one clear error that names the variable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DREAMER_V2_DMC", raising=False)
    assert script_path("v2-dmc") == ROOT / "dreamer_v2_dmc.py"
    monkeypatch.setenv("DREAMER_V2_DMC", "dreamer_v2_atari.py")
    assert script_path("v2-dmc") == ROOT / "dreamer_v2_atari.py"
    copy = tmp_path / "my_dreamer_v2_dmc.py"
    shutil.copyfile(ROOT / "dreamer_v2_dmc.py", copy)
    monkeypatch.setenv("DREAMER_V2_DMC", str(copy))
    assert script_path("v2-dmc") == copy.resolve()
    monkeypatch.setenv("DREAMER_V2_DMC", "my_dreamer_v2_dmc.py")  # in the working directory, not in the repo root
    with pytest.raises(FileNotFoundError, match=r"^DREAMER_V2_DMC=my_dreamer_v2_dmc\.py: no such \.py file"):
        script_path("v2-dmc")


def test_load_script_imports_a_copy_under_its_own_name(tmp_path: Path, monkeypatch):
    """A copy elsewhere is imported from its file under its own module name (with its folder on sys.path), once; a copy
    with the original's file name cannot share the original's module and is refused."""
    monkeypatch.delenv("DREAMER_V1", raising=False)
    original = load_script("v1")
    assert Path(original.__file__) == ROOT / "dreamer_v1_atari.py" and sys.modules["dreamer_v1_atari"] is original
    copy = tmp_path / "my_dreamer_v1_atari.py"
    shutil.copyfile(ROOT / "dreamer_v1_atari.py", copy)
    monkeypatch.setenv("DREAMER_V1", str(copy))
    monkeypatch.setattr(sys, "path", list(sys.path))  # put back afterwards, as is sys.modules below
    try:
        module = load_script("v1")
        assert module is not original and module.__name__ == "my_dreamer_v1_atari"
        assert Path(module.__file__) == copy.resolve() and str(copy.resolve().parent) in sys.path
        assert load_script("v1") is module and sys.modules["my_dreamer_v1_atari"] is module
        assert module.Args().exp_name == "my_dreamer_v1_atari"  # the copy knows its own name
    finally:
        sys.modules.pop("my_dreamer_v1_atari", None)
    (tmp_path / "other").mkdir()
    shutil.copyfile(ROOT / "dreamer_v1_atari.py", tmp_path / "other" / "dreamer_v1_atari.py")
    monkeypatch.setenv("DREAMER_V1", str(tmp_path / "other" / "dreamer_v1_atari.py"))
    with pytest.raises(ImportError, match="a module named dreamer_v1_atari is already loaded"):
        load_script("v1")


def test_maths_args_are_parsed_into_overrides(monkeypatch):
    from tests.test_identical_maths import extra_args

    monkeypatch.setenv("DREAMER_V2_DMC_MATHS_ARGS", "gru_blocks=8; deter_size=32 kl_balance=0.5  model_size=XS;")
    assert extra_args("v2-dmc") == [{"gru_blocks": 8}, {"deter_size": 32, "kl_balance": 0.5, "model_size": "XS"}]
    monkeypatch.delenv("DREAMER_V2_DMC_MATHS_ARGS")
    assert extra_args("v2-dmc") == []
    monkeypatch.setenv("DREAMER_V3_MATHS_ARGS", "gru_blocks 8")
    with pytest.raises(ValueError, match=r"DREAMER_V3_MATHS_ARGS: 'gru_blocks' is not field=value"):
        extra_args("v3")
