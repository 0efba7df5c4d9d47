"""``numaguard webhook``: flags reach the settings, and unusable settings exit 2 before anything is served."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from numaguard_cli import main as cli
from numaguard_cli import webhook_cmd


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    webhook_cmd.add_arguments(parser)
    return parser.parse_args(argv)


def test_the_webhook_subcommand_is_registered_with_its_flags() -> None:
    parser = cli.build_parser("webhook")
    args = parser.parse_args(["webhook", "--failure-mode", "allow", "--numa-cpus", "16", "--numa-memory", "64Gi"])
    assert args._module is webhook_cmd
    assert (args.failure_mode, args.numa_cpus, args.numa_memory) == ("allow", 16, "64Gi")


def test_half_a_numa_node_size_exits_2_naming_the_pair(capsys: pytest.CaptureFixture[str]) -> None:
    assert webhook_cmd.run(parse("--numa-cpus", "16")) == 2
    assert "numa_cpus and numa_memory go together" in capsys.readouterr().err


def test_no_way_to_find_enforcers_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBHOOK_ENFORCERS_FILE", raising=False)
    assert webhook_cmd.run(parse("--listen", "127.0.0.1:0")) == 2
    assert "no enforcer discovery" in capsys.readouterr().err


def test_an_unreadable_serving_certificate_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    enforcers = tmp_path / "enforcers.yaml"
    enforcers.write_text("node-a: https://127.0.0.1:9443\n")
    args = parse(
        "--enforcers-file",
        str(enforcers),
        "--tls-cert",
        str(tmp_path / "no.crt"),
        "--tls-key",
        str(tmp_path / "no.key"),
    )
    assert webhook_cmd.run(args) == 2
    assert "no.crt" in capsys.readouterr().err
