"""The deployment files: the Dockerfile, compose.yaml and the systemd unit.

The image is built only where a Docker engine answers; the compose file is
checked against the Compose schema by ``docker-compose config`` (it needs no
engine) and the unit by ``systemd-analyze verify``; each file's structure is
also checked here, beside the config it has to agree with.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import Config, ServerConfig, load_config
from tests.conftest import RunningGateway

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
UNIT = ROOT / "deploy" / "agentgw.service"
GRACE_S = ServerConfig().shutdown_grace_s
TOKEN = "s3cret-0123456789abcdef"


# -- the Dockerfile ------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuations joined, comments dropped.

    Docker removes comment lines before it joins a continued instruction, so a
    comment inside an ``ENV ... \\`` block is allowed and dropped here too.
    """
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if not pending and not line.strip():
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, f"a continued instruction runs off the end: {pending!r}"
    return instructions


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    return instructions[starts[-1] :]


def env_of(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions:
        if word == "ENV":
            for pair in shlex.split(rest):
                name, sep, value = pair.partition("=")
                assert sep, f"ENV {pair!r}: use NAME=value"
                env[name] = value
    return env


@pytest.fixture(scope="module")
def docker() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))


def torch_pin() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (pin,) = [d for d in pyproject["project"]["optional-dependencies"]["models"] if "torch" in d]
    return pin


def test_the_image_is_on_python_3_11_slim(docker: list[tuple[str, str]]) -> None:
    args = dict(rest.split("=", 1) for word, rest in docker if word == "ARG" and "=" in rest)
    bases = [rest.split()[0] for word, rest in docker if word == "FROM"]
    assert len(bases) == 2, "a build stage and a runtime stage"
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert image.startswith("python:3.11-slim"), image


def test_cpu_torch_is_pinned_before_the_project_is_installed(
    docker: list[tuple[str, str]],
) -> None:
    runs = [rest for word, rest in docker if word == "RUN"]
    torch_runs = [i for i, run in enumerate(runs) if re.search(r"pip install .*torch==", run)]
    project_runs = [i for i, run in enumerate(runs) if "[models,postgres]" in run]
    assert torch_runs, "no RUN installs torch on its own"
    assert project_runs, "no RUN installs the project with its models and postgres extras"
    assert torch_runs[0] < project_runs[0]
    torch_run = runs[torch_runs[0]]
    # The same pin as the models extra and scripts/setup, from the CPU index.
    assert torch_pin() in torch_run
    assert f'TORCH_PIN="{torch_pin()}"' in (ROOT / "scripts" / "setup").read_text("utf-8")
    assert "--index-url" in torch_run
    cpu_index = [rest for word, rest in docker if word == "ARG" and "TORCH_INDEX_URL=" in rest]
    assert cpu_index
    assert cpu_index[0].endswith("/whl/cpu")


def test_every_package_is_copied_into_the_build(docker: list[tuple[str, str]]) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # packages.find's include patterns name the top-level packages ("memory*").
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = {pattern.rstrip("*").split(".")[0] for pattern in patterns}
    copied: set[str] = set()
    for word, rest in docker:
        if word == "COPY" and not rest.startswith("--from"):
            sources = rest.split()[:-1]
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            copied.update(sources)
    assert top_level <= copied, f"not copied: {sorted(top_level - copied)}"
    # pyproject's readme and license files ship with the package.
    assert {"pyproject.toml", "README.md", "LICENSE"} <= copied


def test_the_runtime_stage_runs_as_a_user_with_data_in_a_volume(
    docker: list[tuple[str, str]],
) -> None:
    stage = final_stage(docker)
    users = [rest for word, rest in stage if word == "USER"]
    assert users, "the runtime stage never leaves root"
    assert users[-1].split(":")[0] not in ("root", "0")
    words = [word for word, _ in stage]
    # Root only for what needs it: the user switch comes before the command.
    assert words.index("USER") < words.index("CMD")
    assert ("VOLUME", "/data") in stage
    env = env_of(stage)
    assert env["AGENTGW_STORE__DATA_DIR"] == "/data"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert ("EXPOSE", env["AGENTGW_SERVER__PORT"]) in stage
    assert [rest for word, rest in stage if word == "ENTRYPOINT"] == ['["agentgw"]']
    assert [rest for word, rest in stage if word == "CMD"] == ['["run"]']


def healthcheck_command(docker: list[tuple[str, str]]) -> list[str]:
    (check,) = [rest for word, rest in final_stage(docker) if word == "HEALTHCHECK"]
    command = json.loads(check[check.index("CMD") + len("CMD") :].strip())
    assert isinstance(command, list)
    return [str(part) for part in command]


def test_the_healthcheck_asks_healthz_with_python(docker: list[tuple[str, str]]) -> None:
    command = healthcheck_command(docker)
    # The slim image has no curl; python is there.
    assert command[0] == "python"
    assert "/healthz" in " ".join(command)


async def run_healthcheck(command: list[str], port: int) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *command[1:],
        env={"AGENTGW_SERVER__PORT": str(port), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(process.wait(), timeout=30)


async def test_the_healthcheck_passes_on_a_running_gateway_and_fails_without_one(
    docker: list[tuple[str, str]], running: RunningGateway
) -> None:
    command = healthcheck_command(docker)
    port = running.server.port
    assert port is not None
    assert await run_healthcheck(command, port) == 0
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert await run_healthcheck(command, free) != 0


def test_the_build_context_leaves_out_local_state() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    for entry in (".git", ".venv", "data", "secrets", ".env", "agentgw.toml"):
        assert entry in ignored, entry


def docker_engine() -> str | None:
    """None when a Docker engine answers here, else why not."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    done = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        return f"no Docker engine answers: {said[-1] if said else done.returncode}"
    return None


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_image_builds_and_runs_as_a_user() -> None:
    reason = docker_engine()
    if reason is not None:
        pytest.skip(reason)
    tag = "agentgw:test"
    subprocess.run(["docker", "build", "-t", tag, str(ROOT)], check=True, timeout=3500)
    inspected = subprocess.run(
        ["docker", "image", "inspect", tag], capture_output=True, text=True, check=True
    )
    (image,) = json.loads(inspected.stdout)
    assert image["Config"]["User"] == "agentgw"
    assert "/healthz" in " ".join(image["Config"]["Healthcheck"]["Test"])
    assert "/data" in image["Config"]["Volumes"]
    version = subprocess.run(
        ["docker", "run", "--rm", tag, "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert version.stdout.strip() == f"agentgw {pyproject['project']['version']}"


# -- compose.yaml --------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and (
        subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False, timeout=30
        ).returncode
        == 0
    ):
        return ["docker", "compose"]
    return None


@pytest.mark.parametrize("profile", [[], ["--profile", "postgres"]], ids=["default", "postgres"])
def test_compose_file_passes_the_compose_schema(profile: list[str], tmp_path: Path) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    # No .env or variable of the developer's may change what is checked.
    no_env = tmp_path / "empty.env"
    no_env.write_text("", encoding="utf-8")
    done = subprocess.run(
        [
            *command,
            *profile,
            "--env-file",
            str(no_env),
            "--project-directory",
            str(ROOT),
            "-f",
            str(COMPOSE),
            "config",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "COMPOSE_PROJECT_NAME": "agentgw"},
    )
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert services["postgres"]["profiles"] == ["postgres"]
    # ${AGENTGW_STORE__URL:-} left unset: empty, which is SQLite in /data.
    assert services["agentgw"]["environment"]["AGENTGW_STORE__URL"] == ""


def test_postgres_is_optional_behind_a_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgres"]["profiles"] == ["postgres"]
    assert "profiles" not in services["agentgw"], "the gateway itself always runs"
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    assert "ports" not in services["postgres"], "the database stays on the compose network"


def test_secrets_are_files_mounted_for_the_services_that_name_them(
    compose: dict[str, Any],
) -> None:
    declared = compose["secrets"]
    for name, service in compose["services"].items():
        listed = set(service.get("secrets", []))
        assert listed <= set(declared), f"{name}: undeclared secrets {listed - set(declared)}"
        for variable, value in service.get("environment", {}).items():
            if variable.endswith("_FILE"):
                assert value.startswith("/run/secrets/"), variable
                assert value.removeprefix("/run/secrets/") in listed, (name, variable)
    for name, secret in declared.items():
        assert secret["file"].startswith("./secrets/"), name


def seconds(text: str) -> float:
    """``30s``, ``1m30s``, ``90`` (as compose and systemd write durations) in seconds."""
    if re.fullmatch(r"[0-9.]+", text):
        return float(text)
    units = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    total = 0.0
    parts = re.findall(r"([0-9.]+)\s*([a-z]+)", text)
    assert "".join(f"{n}{u}" for n, u in parts) == text.replace(" ", ""), text
    for number, unit in parts:
        total += float(number) * units[unit]
    return total


def test_compose_waits_for_the_drain_before_killing(compose: dict[str, Any]) -> None:
    grace = seconds(compose["services"]["agentgw"]["stop_grace_period"])
    # Turns in flight get shutdown_grace_s, then the index is saved and the store closed.
    assert grace >= 2 * GRACE_S


def test_the_gateway_of_compose_reads_its_secrets(
    compose: dict[str, Any], docker: list[tuple[str, str]], tmp_path: Path
) -> None:
    # The image's environment, then compose's, with the secrets where Docker mounts them.
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    (secrets / "agentgw_access_token").write_text(TOKEN + "\n", encoding="utf-8")
    (secrets / "anthropic_api_key").write_text("sk-test\n", encoding="utf-8")
    env = env_of(final_stage(docker))
    env["AGENTGW_STORE__DATA_DIR"] = str(tmp_path / "data")
    for variable, value in compose["services"]["agentgw"]["environment"].items():
        # ${NAME:-} with nothing in .env: empty.
        unset = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))
        env[variable] = unset.replace("/run/secrets", str(secrets))
    empty = tmp_path / "agentgw.toml"
    empty.write_text("", encoding="utf-8")
    config: Config = load_config(empty, env=env)
    assert config.server.host == "0.0.0.0"
    assert config.server.access_token == TOKEN
    assert config.anthropic_api_key == "sk-test"
    assert config.database_url.startswith("sqlite+aiosqlite:")


# -- the systemd unit ----------------------------------------------------------


def unit_entries(text: str) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> values (systemd allows a key more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{line!r} is not key=value"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def with_examples(text: str) -> str:
    """The unit with its commented-out credential examples switched on."""
    return re.sub(r"^#((?:LoadCredential|Environment)=)", r"\1", text, flags=re.MULTILINE)


@pytest.fixture(scope="module")
def unit() -> dict[str, dict[str, list[str]]]:
    return unit_entries(UNIT.read_text(encoding="utf-8"))


@pytest.mark.parametrize("examples", [False, True], ids=["as-shipped", "with-credentials"])
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path, examples: bool) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    text = UNIT.read_text(encoding="utf-8")
    if examples:
        text = with_examples(text)
    # verify also checks that ExecStart's program exists: /opt/agentgw is not here.
    program = tmp_path / "agentgw"
    program.write_text("#!/bin/sh\n", encoding="utf-8")
    program.chmod(0o755)
    text = text.replace("ExecStart=/opt/agentgw/bin/agentgw ", f"ExecStart={program} ")
    copy = tmp_path / "agentgw.service"
    copy.write_text(text, encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # An unknown key or a value it cannot parse is only a warning: none is allowed.
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == ""
    assert done.stdout.strip() == ""


def test_the_unit_runs_agentgw_with_its_state_directory(
    unit: dict[str, dict[str, list[str]]],
) -> None:
    service = unit["Service"]
    (exec_start,) = service["ExecStart"]
    program, *args = shlex.split(exec_start)
    assert program.endswith("/bin/agentgw")
    assert args == ["run"]
    assert service["StateDirectory"] == ["agentgw"]
    environment = [pair for line in service["Environment"] for pair in shlex.split(line)]
    assert "AGENTGW_STORE__DATA_DIR=%S/agentgw" in environment
    assert "HF_HUB_OFFLINE=1" in environment
    assert service.get("DynamicUser") == ["yes"] or service.get("User", ["root"]) != ["root"]


def test_the_unit_waits_for_the_drain_before_killing(
    unit: dict[str, dict[str, list[str]]],
) -> None:
    (timeout,) = unit["Service"]["TimeoutStopSec"]
    assert seconds(timeout) >= 2 * GRACE_S


def test_the_unit_is_hardened(unit: dict[str, dict[str, list[str]]]) -> None:
    service = unit["Service"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
    }.items():
        assert service.get(key) == [value], key
    assert service["CapabilityBoundingSet"] == [""]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_the_credential_examples_name_secrets_the_gateway_reads(tmp_path: Path) -> None:
    service = unit_entries(with_examples(UNIT.read_text(encoding="utf-8")))["Service"]
    credentials = {entry.split(":", 1)[0] for entry in service["LoadCredential"]}
    env: dict[str, str] = {}
    for line in service["Environment"]:
        for pair in shlex.split(line):
            name, _, value = pair.partition("=")
            if name.endswith("_FILE"):
                assert value.startswith("%d/"), pair  # %d: $CREDENTIALS_DIRECTORY
                credential = value.removeprefix("%d/")
                assert credential in credentials, pair
                secret = tmp_path / credential
                secret.write_text(TOKEN + "\n", encoding="utf-8")
                env[name] = str(secret)
    assert len(env) >= 3
    empty = tmp_path / "agentgw.toml"
    empty.write_text("", encoding="utf-8")
    config = load_config(empty, env=env)
    assert config.anthropic_api_key == TOKEN
    assert config.server.access_token == TOKEN
    assert config.telegram_bot_token == TOKEN


# -- the license ---------------------------------------------------------------

# sha256 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_one_pyproject_names() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
