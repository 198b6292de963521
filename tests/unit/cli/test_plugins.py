"""The twin adds `servingctl local` through the `servingctl.commands` entry point: the command line
lists it when the twin is installed and knows nothing of it otherwise (it never imports the twin)."""

import pytest

from servingctl_cli import main


def test_the_installed_twin_adds_local_to_the_command_line() -> None:
    assert main.plugins() == {"local": "servingctl_twin.plugin"}
    parser = main.build_parser("local")
    args = parser.parse_args(["local", "up", "--time-scale", "10"])
    assert args.local_command == "up"


def test_without_the_twin_local_is_an_unknown_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(main, "plugins", dict)
    with pytest.raises(SystemExit) as exit_:
        main.main(["local", "up"])
    assert exit_.value.code == 2
    assert "invalid choice: 'local'" in capsys.readouterr().err
