"""Where the config file is found, secrets from NAME_FILE, and the one version."""

from __future__ import annotations

import importlib
import io
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

import gateway
from gateway import config as config_module
from gateway.config import Config, ConfigError, find_config_file, load_config
from gateway.doctor import Report, report_config

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-0123456789abcdef"


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An empty working directory, a user config folder and a stand-in for /etc/agentgw."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    system = tmp_path / "etc" / "agentgw"
    monkeypatch.setattr(config_module, "SYSTEM_CONFIG_DIR", system)
    return {
        "work": work / "agentgw.toml",
        "xdg": tmp_path / "xdg" / "agentgw" / "agentgw.toml",
        "home": tmp_path / "home" / ".config" / "agentgw" / "agentgw.toml",
        "system": system / "agentgw.toml",
    }


def load(tmp_path: Path, env: dict[str, str]) -> Config:
    """``load_config`` on an empty file: no config of this machine's leaks in."""
    path = tmp_path / "empty.toml"
    path.write_text("", encoding="utf-8")
    return load_config(path, env=env)


def put(path: Path, port: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[server]\nport = {port}\n", encoding="utf-8")


def test_the_system_config_is_read_when_nothing_closer_exists(places: dict[str, Path]) -> None:
    env = {"XDG_CONFIG_HOME": str(places["xdg"].parents[1])}
    assert load_config(env=env).server.port == 8080
    put(places["system"], 9003)
    assert load_config(env=env).server.port == 9003


def test_the_user_config_wins_over_the_system_one(places: dict[str, Path]) -> None:
    put(places["system"], 9003)
    put(places["xdg"], 9002)
    env = {"XDG_CONFIG_HOME": str(places["xdg"].parents[1])}
    assert load_config(env=env).server.port == 9002
    assert find_config_file(env) == places["xdg"]


def test_without_xdg_config_home_the_user_config_is_under_home(places: dict[str, Path]) -> None:
    put(places["home"], 9004)
    home = str(places["home"].parents[2])
    assert load_config(env={"HOME": home}).server.port == 9004
    # A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    assert load_config(env={"HOME": home, "XDG_CONFIG_HOME": "rel"}).server.port == 9004


def test_the_working_directory_wins_and_config_wins_over_all(
    places: dict[str, Path], tmp_path: Path
) -> None:
    put(places["system"], 9003)
    put(places["xdg"], 9002)
    put(places["work"], 9001)
    env = {"XDG_CONFIG_HOME": str(places["xdg"].parents[1])}
    assert load_config(env=env).server.port == 9001
    chosen = tmp_path / "chosen.toml"
    put(chosen, 9005)
    assert load_config(chosen, env=env).server.port == 9005


def test_doctor_names_the_file_that_was_read(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(places["xdg"].parents[1]))
    put(places["system"], 9003)
    out = io.StringIO()
    report_config(load_config(), None, Report(out))
    assert f"{places['system'].resolve()} (read and valid)" in out.getvalue()

    places["system"].unlink()
    out = io.StringIO()
    report_config(load_config(), None, Report(out))
    assert "no config file" in out.getvalue()
    assert str(places["system"]) in out.getvalue()


SECRETS: list[tuple[str, Callable[[Config], str]]] = [
    ("ANTHROPIC_API_KEY", lambda c: c.anthropic_api_key),
    ("OPENAI_API_KEY", lambda c: c.openai_api_key),
    ("TELEGRAM_BOT_TOKEN", lambda c: c.telegram_bot_token),
    ("TELEGRAM_WEBHOOK_SECRET", lambda c: c.telegram_webhook_secret),
    ("AGENTGW_SERVER__ACCESS_TOKEN", lambda c: c.server.access_token),
]


@pytest.mark.parametrize(("name", "read"), SECRETS, ids=[name for name, _ in SECRETS])
def test_each_secret_may_come_from_a_file(
    tmp_path: Path, name: str, read: Callable[[Config], str]
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(TOKEN + "\n", encoding="utf-8")  # as `echo ... > file` leaves it
    assert read(load(tmp_path, {name + "_FILE": str(secret)})) == TOKEN
    # The plain variable still works.
    assert read(load(tmp_path, {name: TOKEN})) == TOKEN


def test_a_renamed_secret_variable_has_its_file_too(tmp_path: Path) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text('[claude]\napi_key_env = "MY_CLAUDE_KEY"\n', encoding="utf-8")
    secret = tmp_path / "key"
    secret.write_text("sk-from-file", encoding="utf-8")
    assert load_config(path, env={"MY_CLAUDE_KEY_FILE": str(secret)}).anthropic_api_key == (
        "sk-from-file"
    )


def test_the_access_token_file_opens_a_non_loopback_host(tmp_path: Path) -> None:
    path = tmp_path / "agentgw.toml"
    path.write_text('[server]\nhost = "0.0.0.0"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="access_token"):
        load_config(path, env={})
    secret = tmp_path / "token"
    secret.write_text(TOKEN, encoding="utf-8")
    env = {"AGENTGW_SERVER__ACCESS_TOKEN_FILE": str(secret)}
    assert load_config(path, env=env).server.access_token == TOKEN


@pytest.mark.parametrize("name", [name for name, _ in SECRETS])
def test_a_secret_set_both_ways_is_refused(tmp_path: Path, name: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text(TOKEN, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"\${name} and \${name}_FILE are both set"):
        load(tmp_path, {name: TOKEN, name + "_FILE": str(secret)})


@pytest.mark.parametrize("name", [name for name, _ in SECRETS])
def test_an_unreadable_secret_file_is_an_error_naming_variable_and_path(
    tmp_path: Path, name: str
) -> None:
    missing = tmp_path / "no-such-file"
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, {name + "_FILE": str(missing)})
    assert f"${name}_FILE" in str(caught.value)
    assert str(missing) in str(caught.value)
    assert "No such file" in str(caught.value)
    # A folder where a file was meant (a secret mounted at the wrong path).
    with pytest.raises(ConfigError, match=re.escape(f"${name}_FILE: cannot read {tmp_path}")):
        load(tmp_path, {name + "_FILE": str(tmp_path)})


def test_an_empty_secret_file_is_an_unset_secret(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    assert load(tmp_path, {"ANTHROPIC_API_KEY_FILE": str(empty)}).anthropic_api_key == ""


def test_the_version_is_the_one_in_pyproject() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert gateway.__version__ == metadata.version("agentgw")
    assert gateway.__version__ == pyproject["project"]["version"]


def test_the_version_is_written_once() -> None:
    # pyproject.toml holds it; no module writes a version string of its own.
    assigned = re.compile(r"""^__version__\s*=\s*["']""", re.MULTILINE)
    for package in ("gateway", "channels", "memory", "persona", "voice", "web"):
        for source in (ROOT / package).rglob("*.py"):
            assert not assigned.search(source.read_text(encoding="utf-8")), source


def test_a_source_tree_without_metadata_still_has_a_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    try:
        assert importlib.reload(gateway).__version__ == "0+unknown"
    finally:
        monkeypatch.undo()
        importlib.reload(gateway)


def test_the_cli_prints_the_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip() == f"agentgw {gateway.__version__}"
