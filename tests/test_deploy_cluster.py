"""deploy/compose.cluster.yaml and deploy/Caddyfile: three gateways on one
PostgreSQL behind a proxy (README "Several processes")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import load_config
from tests.test_deploy_files import compose_command

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "compose.cluster.yaml"
CADDYFILE = ROOT / "deploy" / "Caddyfile"
GATEWAYS = ["agentgw-1", "agentgw-2", "agentgw-3"]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The services as Compose resolves them (anchors and merges applied)."""
    command = compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    env_file = tmp_path_factory.mktemp("env") / "cluster.env"
    env_file.write_text(
        "AGENTGW_STORE__URL=postgresql+asyncpg://agentgw:pw@postgres:5432/agentgw\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            *command,
            "--env-file",
            str(env_file),
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
    resolved: dict[str, Any] = yaml.safe_load(done.stdout)["services"]
    return resolved


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source, from Compose's long or short (docker-compose 1.x) syntax."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        found[target] = source
    return found


def published(service: dict[str, Any]) -> list[str]:
    ports = service.get("ports", [])
    return [
        p.split("/")[0].rsplit(":", 2)[-2] if isinstance(p, str) else str(p["published"])
        for p in ports
    ]


def test_three_gateways_share_the_database_with_a_data_volume_each(
    services: dict[str, Any],
) -> None:
    urls, volumes = set(), set()
    for name in GATEWAYS:
        environment = services[name]["environment"]
        # Each one loads as a cluster member on the shared PostgreSQL.
        # (The secret files exist only in the containers.)
        env = {k: str(v) for k, v in environment.items() if not k.endswith("_FILE")}
        config = load_config(env=env)
        assert config.store.cluster
        assert config.database_url.startswith("postgresql+asyncpg://")
        urls.add(config.database_url)
        volumes.add(mounts(services[name])["/data"])
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert len(urls) == 1
    assert len(volumes) == 3  # index files are per process, never shared
    # Only the proxy is published; the gateways and PostgreSQL stay on the network.
    assert published(services["proxy"]) == ["8080"]
    assert not any("ports" in services[name] for name in [*GATEWAYS, "postgres"])


def test_the_proxy_spreads_over_every_gateway_and_checks_readyz(
    services: dict[str, Any],
) -> None:
    text = CADDYFILE.read_text(encoding="utf-8")
    [upstreams] = re.findall(r"reverse_proxy ([^{]+)\{", text)
    assert sorted(upstreams.split()) == [f"{name}:8080" for name in GATEWAYS]
    assert re.search(r"^\s*health_uri /readyz$", text, re.MULTILINE)
    assert "lb_policy round_robin" in text  # no sticky sessions
    assert Path(mounts(services["proxy"])["/etc/caddy/Caddyfile"]) == CADDYFILE
