"""`worldtune doctor` runs on a CPU machine and names a GPU whose arch torch was not built for."""

from __future__ import annotations

import torch
from rich.console import Console

from worldtune import doctor


def test_doctor_runs_on_cpu():
    console = Console(record=True, width=200)
    code = doctor.run(console)
    out = console.export_text()
    failed = [c for c in doctor.all_checks() if c.status == "fail"]
    assert code == (1 if failed else 0)
    for row in ("Python", "torch", "diffusers", "SDPA backends", "codec libx264", "free disk"):
        assert row in out
    assert all(c.status == "ok" for c in doctor.library_checks())  # the dev venv meets every minimum


def test_arch_list_rules():
    assert doctor.arch_supported((9, 0), ["sm_80", "sm_90a"])
    assert doctor.arch_supported((12, 0), ["sm_80", "compute_90"])  # PTX JIT onto a newer GPU
    assert not doctor.arch_supported((12, 0), ["sm_80", "sm_90"])
    assert not doctor.arch_supported((7, 5), ["sm_80", "compute_80"])  # PTX does not run on older GPUs


def test_missing_gpu_arch_is_a_failure_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (12, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake Blackwell")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_90"])
    gpu = [c for c in doctor.torch_checks() if c.name == "GPU 0"]
    assert len(gpu) == 1 and gpu[0].status == "fail"
    assert "sm_120" in gpu[0].detail and "install a torch build that includes sm_120" in gpu[0].detail
    monkeypatch.setattr(doctor, "attention_checks", lambda: [])  # real SDPA flags need a real GPU
    console = Console(record=True, width=300)
    assert doctor.run(console) == 1
    assert "Fake Blackwell is sm_120" in console.export_text()
