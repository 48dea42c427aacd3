"""--precision auto: bf16 where the hardware runs it natively, fp32 elsewhere, with the hardware queries mocked; and one
warning line when an explicit bf16 will be emulated. The same rule in every script."""

import pytest
import torch

import dreamer_v1_atari as v1
import dreamer_v2_atari as v2
import dreamer_v2_dmc as v2_dmc
import dreamer_v3_atari as v3

SCRIPTS = [v1, v2, v3, v2_dmc]
CPU, GPU = torch.device("cpu"), torch.device("cuda:0")  # a device object needs no GPU: only the mocked queries read it


@pytest.fixture
def hardware(monkeypatch):
    """Set what torch reports: hardware(avx512_bf16=..., amx=..., capability=(major, minor))."""

    def set_hardware(avx512_bf16=False, amx=False, capability=(8, 0), isa="AVX2"):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: isa)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"GPU sm{capability[0]}{capability[1]}")

    return set_hardware


@pytest.mark.parametrize("m", SCRIPTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize(
    "device, cpu_flags, capability, native",
    [
        (CPU, dict(avx512_bf16=True), None, True),  # Xeon with AVX512-BF16 (Cooper Lake and later)
        (CPU, dict(amx=True), None, True),  # AMX tiles (Sapphire Rapids)
        (CPU, dict(avx512_bf16=True, amx=True), None, True),
        (CPU, dict(), None, False),  # AVX2 only: most laptops, AMD EPYC Zen 2/3
        (GPU, dict(), (8, 0), True),  # A100
        (GPU, dict(), (9, 0), True),  # H100 / H200
        (GPU, dict(avx512_bf16=True), (7, 0), False),  # V100: the host's CPU does not matter
        (GPU, dict(), (7, 5), False),  # T4
    ],
)
def test_auto_picks_bf16_only_where_native(m, hardware, capsys, device, cpu_flags, capability, native):
    hardware(capability=capability or (0, 0), **cpu_flags)
    assert m.native_bf16(device) is native
    args = m.Args(precision="auto")
    note = m.choose_precision(args, device)
    assert args.precision == ("bf16" if native else "32")  # resolved: a checkpoint never stores "auto"
    where = "this CPU" if device.type == "cpu" else f"this GPU (GPU sm{capability[0]}{capability[1]})"
    assert note == f" (auto: {where} {'runs bf16 natively' if native else 'has no native bf16'})"
    assert capsys.readouterr().err == ""  # the default never warns


@pytest.mark.parametrize("m", SCRIPTS, ids=lambda m: m.__name__)
def test_explicit_bf16_without_native_bf16_warns_once_and_still_runs_bf16(m, hardware, capsys):
    hardware(isa="AVX2")
    args = m.Args(precision="bf16")
    note = m.choose_precision(args, CPU)
    assert args.precision == "bf16"
    assert note == " (emulated: this CPU has no native bf16)"
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: --precision bf16 on this CPU (torch reports AVX2), which has no native bf16: it is emulated, and a "
        "gradient step is likely 10-30x slower than in fp32; use --precision auto or 32"
    ]
    args = m.Args(precision="bf16", rank=1)  # under torchrun only rank 0 says it
    m.choose_precision(args, CPU)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("m", SCRIPTS, ids=lambda m: m.__name__)
def test_explicit_values_are_kept(m, hardware, capsys):
    hardware(avx512_bf16=True)
    args = m.Args(precision="bf16")
    assert m.choose_precision(args, CPU) == " (native on this CPU)" and args.precision == "bf16"
    hardware()
    args = m.Args(precision="32")
    assert m.choose_precision(args, CPU) == "" and args.precision == "32"
    assert capsys.readouterr().err == ""


def test_defaults():
    """V1, V2 and V2-DMC follow the hardware; DreamerV3 keeps the paper's float32 (docs/speed.md, Choosing --precision)."""
    assert v1.Args().precision == v2.Args().precision == v2_dmc.Args().precision == "auto"
    assert v3.Args().precision == "32"
