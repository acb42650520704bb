"""Configuration: the documented example, env overrides, validation, secrets."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gateway.brains import resolve_kind
from gateway.config import SECRET_FIELDS, Config, load_config
from gateway.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parent.parent / "config.example.toml"


def section_fields() -> list[tuple[str, Any]]:
    """(name, default instance) of every section of Config, whatever sections exist."""
    sections = []
    for f in dataclasses.fields(Config):
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
            if dataclasses.is_dataclass(default):
                sections.append((f.name, default))
    return sections


def as_written(value: Any) -> Any:
    """A TOML value as the config holds it: arrays become tuples."""
    if isinstance(value, list):
        return tuple(as_written(v) for v in value)
    return value


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentgw.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_has_sections_to_document() -> None:
    names = [name for name, _ in section_fields()]
    assert {"server", "store", "brain", "claude", "openai", "webchat"} <= set(names)


@pytest.mark.parametrize(("section", "default"), section_fields(), ids=lambda v: str(v)[:20])
def test_example_documents_every_key_with_its_default(section: str, default: Any) -> None:
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert section in example, f"[{section}] is missing from config.example.toml"
    written = example[section]
    for f in dataclasses.fields(default):
        key = f"{section}.{f.name}"
        assert f.name in written, f"{key} is missing from config.example.toml"
        expected = getattr(default, f.name)
        if dataclasses.is_dataclass(expected):
            # A table in the section ([upkeep.schedule]): its keys and their defaults.
            expected = dataclasses.asdict(expected)  # type: ignore[arg-type]
        value = as_written(written[f.name])
        # The type too: 10 for a float default would hide that the key takes 10.5.
        assert (type(value), value) == (type(expected), expected), (
            f"{key}: example says {value!r}, default is {expected!r}"
        )
    unknown = set(written) - {f.name for f in dataclasses.fields(default)}
    assert not unknown, f"[{section}] documents keys Config does not have: {unknown}"


def test_example_has_no_other_sections_and_no_secrets() -> None:
    example = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert set(example) == {name for name, _ in section_fields()}
    for secret in SECRET_FIELDS:
        assert secret not in example


def test_every_section_of_the_example_has_a_comment() -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if line.startswith("["):
            following = lines[index + 1] if index + 1 < len(lines) else ""
            assert following.startswith("#"), f"{line} has no comment under it"


def test_loading_the_example_gives_the_defaults() -> None:
    assert load_config(EXAMPLE, env={}) == Config()


def test_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        load_config(missing, env={})


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path, env={})


def test_file_values_are_used(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = 9100\n[agent]\nname = "Bo"\n')
    config = load_config(path, env={})
    assert config.server.port == 9100
    assert config.agent.name == "Bo"
    assert config.server.host == "127.0.0.1"


def test_env_overrides_the_file_with_type_coercion(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 9100\n")
    env = {
        "AGENTGW_SERVER__PORT": "9000",
        "AGENTGW_STORE__ECHO": "true",
        "AGENTGW_BRAIN__TEMPERATURE": "0.25",
        "AGENTGW_BRAIN__KIND": "scripted",
        "AGENTGW_AGENT__NAME": "Eve",
        "AGENTGW_TELEGRAM__ALLOWED_USER_IDS": "12, 34",
        "AGENTGW_WEBCHAT__MAX_FRAME_BYTES": "1000",
        "UNRELATED": "ignored",
    }
    config = load_config(path, env=env)
    assert config.server.port == 9000
    assert config.store.echo is True
    assert config.brain.temperature == 0.25
    assert config.brain.kind == "scripted"
    assert config.agent.name == "Eve"
    assert config.telegram.allowed_user_ids == (12, 34)
    assert config.webchat.max_frame_bytes == 1000


def test_a_toml_list_keeps_its_items_as_written(tmp_path: Path) -> None:
    """Stop sequences are whitespace that matters; the environment's list is trimmed."""
    path = write(tmp_path, '[openai]\nstop = ["\\nUser:", " ###", ""]\n')
    assert load_config(path, env={}).openai.stop == ("\nUser:", " ###")
    env = {"AGENTGW_OPENAI__STOP": "END, ###"}
    assert load_config(write(tmp_path, ""), env=env).openai.stop == ("END", "###")


def test_overrides_win_over_env(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, ""),
        env={"AGENTGW_SERVER__PORT": "9000"},
        overrides={"server": {"port": 9001}},
    )
    assert config.server.port == 9001


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("[nosuch]\nx = 1\n", {}, "nosuch"),
        ("[server]\nbogus = 1\n", {}, "server.bogus"),
        ("", {"AGENTGW_SERVER__BOGUS": "1"}, "server.bogus"),
        ("", {"AGENTGW_NOSUCH__X": "1"}, "nosuch"),
        ("server = 1\n", {}, "server"),
    ],
)
def test_unknown_sections_and_keys_are_refused(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(write(tmp_path, text), env=env)


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("", {"AGENTGW_SERVER__PORT": "eighty"}, "server.port"),
        ("[server]\nport = 0\n", {}, "server.port"),
        ("[server]\nport = 70000\n", {}, "server.port"),
        ('[server]\nport = "8080"\n', {"AGENTGW_SERVER__PORT": "x"}, "server.port"),
        ("[server]\nport = true\n", {}, "server.port"),
        ("", {"AGENTGW_STORE__ECHO": "maybe"}, "store.echo"),
        ('[brain]\nkind = "gpt"\n', {}, "brain.kind"),
        ("[brain]\ntimeout_s = -1.0\n", {}, "brain.timeout_s"),
        ("[brain]\nmax_retries = -1\n", {}, "brain.max_retries"),
        ("[agent]\nname = 5\n", {}, "agent.name"),
        ('[log]\nlevel = "LOUD"\n', {}, "log.level"),
        ('[openai]\nbase_url = "ftp://x"\n', {}, "openai.base_url"),
        ('[brain]\nkind = "openai"\n', {}, "openai.base_url"),
        ("[webchat]\nmax_frame_bytes = 0\n", {}, "webchat.max_frame_bytes"),
        ("[webchat]\nnew_people_per_hour = -1.0\n", {}, "webchat.new_people_per_hour"),
        ("[webchat]\nnew_people_burst = 0\n", {}, "webchat.new_people_burst"),
        ("[memory]\nindex_cache_mb = 0.0\n", {}, "memory.index_cache_mb"),
    ],
)
def test_bad_values_are_refused_naming_the_key(
    tmp_path: Path, text: str, env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(write(tmp_path, text), env=env)


def test_claude_needs_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        load_config(write(tmp_path, '[brain]\nkind = "claude"\n'), env={})


def test_anthropic_environment_variables_are_honoured(tmp_path: Path) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1234"}
    config = load_config(write(tmp_path, ""), env=env)
    assert config.anthropic_api_key == "sk-test"
    assert config.anthropic_base_url == "http://127.0.0.1:1234"
    assert resolve_kind(config) == "claude"
    # The key never shows up in a printed config.
    assert "sk-test" not in repr(config)


def test_claude_base_url_in_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, '[claude]\nbase_url = "http://127.0.0.1:5555"\n')
    config = load_config(path, env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1234"})
    assert config.anthropic_base_url == "http://127.0.0.1:5555"


def test_api_key_env_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[claude]\napi_key_env = "MY_CLAUDE_KEY"\n')
    config = load_config(path, env={"MY_CLAUDE_KEY": "k2", "ANTHROPIC_API_KEY": "other"})
    assert config.anthropic_api_key == "k2"


def test_without_keys_the_brain_is_offline(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={})
    assert config.anthropic_api_key == ""
    assert resolve_kind(config) == "offline"


def test_openai_compatible_endpoint_is_chosen_when_configured(tmp_path: Path) -> None:
    path = write(tmp_path, '[openai]\nbase_url = "http://127.0.0.1:11434/v1"\nmodel = "llama"\n')
    assert resolve_kind(load_config(path, env={})) == "openai"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('anthropic_api_key = "sk-in-file"\n', "anthropic_api_key"),
        ('telegram_bot_token = "123:abc"\n', "telegram_bot_token"),
        ('[claude]\nanthropic_api_key = "sk-in-file"\n', "claude.anthropic_api_key"),
        ('[claude]\napi_key = "sk-in-file"\n', "claude.api_key"),
        ('[telegram]\ntoken = "123:abc"\n', "telegram.token"),
    ],
)
def test_secrets_in_the_file_are_refused(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")) as caught:
        load_config(write(tmp_path, text), env={})
    # The refusal must not echo the secret back into logs.
    assert "sk-in-file" not in str(caught.value)
    assert "123:abc" not in str(caught.value)


def test_a_secret_at_the_top_of_the_file_says_to_use_the_environment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment"):
        load_config(write(tmp_path, 'anthropic_api_key = "sk-in-file"\n'), env={})


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_non_loopback_host_needs_an_access_token(tmp_path: Path, host: str) -> None:
    path = write(tmp_path, f'[server]\nhost = "{host}"\n')
    with pytest.raises(ConfigError, match=r"server\.access_token"):
        load_config(path, env={})
    config = load_config(path, env={"AGENTGW_SERVER__ACCESS_TOKEN": "s3cret-0123456789abcdef"})
    assert config.server.access_token == "s3cret-0123456789abcdef"
    assert not config.is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_need_no_token(tmp_path: Path, host: str) -> None:
    config = load_config(write(tmp_path, f'[server]\nhost = "{host}"\n'), env={})
    assert config.is_loopback
    assert config.server.access_token == ""


def test_config_is_immutable() -> None:
    config = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("token", "says"),
    [
        ("x", "at least 16"),
        ("short-token-123", "at least 16"),
        ("aaaaaaaaaaaaaaaaaaaaaaaa", "different characters"),
        ("abababababababababab", "different characters"),
        ("                        ", "white space"),
        ("correct horse battery staple", "white space"),
    ],
)
def test_a_guessable_access_token_is_refused_with_how_to_make_one(
    tmp_path: Path, token: str, says: str
) -> None:
    path = write(tmp_path, '[server]\nhost = "0.0.0.0"\n')
    with pytest.raises(ConfigError, match=r"server\.access_token") as caught:
        load_config(path, env={"AGENTGW_SERVER__ACCESS_TOKEN": token})
    assert says in str(caught.value)
    assert "secrets.token_urlsafe(24)" in str(caught.value)


def test_allowed_hosts_are_checked_at_load(tmp_path: Path) -> None:
    good = write(
        tmp_path, '[server]\nallowed_hosts = ["gateway.lan", "chat.example.com:443", "*"]\n'
    )
    assert load_config(good, env={}).server.allowed_hosts == (
        "gateway.lan",
        "chat.example.com:443",
        "*",
    )
    bad = write(tmp_path, '[server]\nallowed_hosts = ["http://gateway.lan/"]\n')
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts"):
        load_config(bad, env={})


# Errors a person can act on: the nearest key, where a bad value came from, and which
# environment variable takes a secret.


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[server]\nprot = 1\n", {}, "unknown key server.prot — did you mean server.port?"),
        ('[brain]\nknd = "offline"\n', {}, "unknown key brain.knd — did you mean brain.kind?"),
        ("[serevr]\nport = 1\n", {}, "unknown config section [serevr] — did you mean [server]?"),
    ],
)
def test_an_unknown_key_in_the_file_suggests_the_nearest(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), env=env)
    assert str(caught.value) == message


def test_an_unknown_key_with_nothing_near_suggests_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "[brain]\nzzzzzz = 1\n"), env={})
    assert str(caught.value) == "unknown key brain.zzzzzz"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"AGENTGW_SERVER__PROT": "9000"},
            "unknown key server.prot (from the environment variable AGENTGW_SERVER__PROT)"
            " — did you mean server.port?",
        ),
        (
            {"AGENTGW_SEREVR__PORT": "9000"},
            "unknown config section [serevr] (from the environment variable "
            "AGENTGW_SEREVR__PORT) — did you mean [server]?",
        ),
        (
            {"AGENTGW_SERVER__PORT": "eighty"},
            "server.port: expected an integer, got 'eighty' "
            "(from the environment variable AGENTGW_SERVER__PORT)",
        ),
        (
            {"AGENTGW_SERVER__PORT": "70000"},
            "server.port: 70000 is not a TCP port "
            "(from the environment variable AGENTGW_SERVER__PORT)",
        ),
    ],
)
def test_a_bad_value_from_the_environment_names_the_variable(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, ""), env=env)
    assert str(caught.value) == message


def test_a_bad_value_from_the_file_does_not_blame_the_environment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, '[server]\nport = "eighty"\n'), env={})
    assert "environment" not in str(caught.value)


def test_a_cli_flag_over_a_variable_is_not_blamed_on_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            write(tmp_path, ""),
            env={"AGENTGW_SERVER__PORT": "9000"},
            overrides={"server": {"port": 0}},
        )
    assert "AGENTGW_SERVER__PORT" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "variable"),
    [
        ('anthropic_api_key = "sk-in-file"\n', "ANTHROPIC_API_KEY"),
        ('[claude]\napi_key = "sk-in-file"\n', "ANTHROPIC_API_KEY"),
        ('[claude]\napi_key_env = "MY_CLAUDE_KEY"\napi_key = "sk-in-file"\n', "MY_CLAUDE_KEY"),
        ('openai_api_key = "sk-in-file"\n', "OPENAI_API_KEY"),
        ('[openai]\napi_key = "sk-in-file"\n', "OPENAI_API_KEY"),
        ('[telegram]\ntoken = "123:abc"\n', "TELEGRAM_BOT_TOKEN"),
        ('[telegram]\nbot_token = "123:abc"\n', "TELEGRAM_BOT_TOKEN"),
        ('[telegram]\ntoken_env = "MY_BOT"\ntoken = "123:abc"\n', "MY_BOT"),
        ('[telegram]\nwebhook_secret = "123:abc"\n', "TELEGRAM_WEBHOOK_SECRET"),
        ('telegram_bot_token = "123:abc"\n', "TELEGRAM_BOT_TOKEN"),
    ],
)
def test_a_secret_in_the_file_names_the_variable_that_takes_it(
    tmp_path: Path, text: str, variable: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), env={})
    message = str(caught.value)
    assert f"environment variable {variable} " in message
    assert "sk-in-file" not in message
    assert "123:abc" not in message


def test_a_secret_in_an_agentgw_variable_names_the_variable_that_takes_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, ""), env={"AGENTGW_CLAUDE__API_KEY": "sk-in-env"})
    message = str(caught.value)
    assert "AGENTGW_CLAUDE__API_KEY" in message
    assert "environment variable ANTHROPIC_API_KEY " in message
    assert "did you mean" not in message  # not "claude.api_key_env", which takes a name
    assert "sk-in-env" not in message


def test_a_cluster_needs_postgresql(tmp_path: Path) -> None:
    path = write(tmp_path, "[store]\ncluster = true\n")
    with pytest.raises(ConfigError, match=r"store\.cluster: needs a PostgreSQL"):
        load_config(path, env={})
    pg = write(tmp_path, '[store]\ncluster = true\nurl = "postgresql+asyncpg://db/agentgw"\n')
    assert load_config(pg, env={}).store.cluster


def test_a_retired_key_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "[memory]\nstale_days = 60\n")
    assert load_config(path, env={}).memory == load_config(None, env={}).memory
    assert "memory.stale_days is no longer read" in caplog.text


def test_the_memory_tree_is_on_by_default(tmp_path: Path) -> None:
    """Issue 23: the tree is on unless a config turns it off (its updates run in the
    background, coalesced per person)."""
    empty = tmp_path / "agentgw.toml"
    empty.touch()
    assert load_config(empty, env={}).memory.tree is True
    assert load_config(empty, env={"AGENTGW_MEMORY__TREE": "false"}).memory.tree is False
