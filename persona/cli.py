"""``agentgw judge calibrate`` and ``agentgw persona ...``: the persona loop from the shell.

``gateway/cli.py`` calls ``add_commands``; heavy imports wait inside the handlers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config import Config, load_config


def _config(args: argparse.Namespace) -> Config:
    path: Path | None = getattr(args, "config", None)
    return load_config(path)


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    judge = sub.add_parser("judge", help="the SyncScore judge")
    judge_sub = judge.add_subparsers(dest="judge_command", required=True)
    calibrate = judge_sub.add_parser(
        "calibrate", help="correlation of the judge with human 0-1 ratings (JSONL)"
    )
    with_config(calibrate)
    calibrate.add_argument("--labels", type=Path, required=True, help="JSONL of rated replies")
    calibrate.add_argument(
        "--judge",
        choices=["local", "llm", "auto"],
        default=None,
        help="the judge (default: persona.judge)",
    )
    calibrate.add_argument(
        "--json", action="store_true", help="print JSON instead of text (default: text)"
    )
    calibrate.set_defaults(func=cmd_judge_calibrate)

    persona = sub.add_parser("persona", help="PersonaState versions and hard rules")
    persona_sub = persona.add_subparsers(dest="persona_command", required=True)

    def command(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> Any:
        parser = persona_sub.add_parser(name, help=help_text)
        with_config(parser)
        parser.add_argument(
            "--json", action="store_true", help="print JSON instead of text (default: text)"
        )
        parser.set_defaults(func=func)
        return parser

    command("versions", "list the PersonaState versions", cmd_persona)
    show = command("show", "one version's state (default: the current one)", cmd_persona)
    show.add_argument(
        "version", type=int, nargs="?", default=None, help="(default: the current version)"
    )
    diff = command("diff", "what changed from version A to version B", cmd_persona)
    diff.add_argument("a", type=int, help="the older version")
    diff.add_argument("b", type=int, help="the newer version")
    rollback = command("rollback", "make version V current again (as a new version)", cmd_persona)
    rollback.add_argument("version", type=int, help="the version to make current")
    rules = command("rules", "hard rules: proposed, confirmed, rejected", cmd_persona)
    rules.add_argument(
        "--status",
        choices=["proposed", "confirmed", "rejected"],
        default=None,
        help="only rules with this status (default: every rule)",
    )
    confirm = command("confirm", "confirm a proposed rule: it becomes hard", cmd_persona)
    confirm.add_argument("rule_id", type=int, help="the rule's id, as listed by persona rules")
    reject = command("reject", "reject a proposed rule, or withdraw a confirmed one", cmd_persona)
    reject.add_argument("rule_id", type=int, help="the rule's id, as listed by persona rules")


def _print(data: Any, as_json: bool, lines: list[str]) -> None:
    text = json.dumps(data, indent=2, default=str) if as_json else "\n".join(lines)
    sys.stdout.write(text + "\n")


def cmd_judge_calibrate(args: argparse.Namespace) -> int:
    config = _config(args)
    result = asyncio.run(_calibrate(config, args.labels, args.judge))
    from persona.calibrate import save_calibration

    saved = save_calibration(config.store.data_dir, result, args.labels)
    lines = [f"judge {result['judge']} on {result['replies']} rated replies"]
    for name, row in result["dimensions"].items():
        r = row["pearson_r"]
        mark = "" if name == "composite" or name not in result["below_bar"] else "  < bar"
        lines.append(f"  {name:>13}: r={'n/a' if r is None else f'{r:+.3f}'} n={row['n']}{mark}")
    below = ", ".join(result["below_bar"]) or "none"
    lines.append(f"below {result['bar']}: {below}")
    lines.append(f"saved to {saved} (the panel's drift page shows it)")
    _print(result, args.json, lines)
    return 0


async def _calibrate(config: Config, labels: Path, kind: str | None) -> dict[str, Any]:
    from gateway.brains import build_brain
    from gateway.context import load_persona
    from persona.build import choose_judge, local_embedder
    from persona.calibrate import calibrate, load_labels
    from persona.judge import SyncPolicy
    from persona.state import MergePolicy, initial_state, load_exemplars

    if kind is not None:
        config = config.replace(persona=_replaced(config.persona, judge=kind))
    persona = await asyncio.to_thread(load_persona, config.agent.persona_file, config.agent.name)
    exemplars = await asyncio.to_thread(load_exemplars, config.persona.exemplars_file)
    state = initial_state(exemplars, MergePolicy())
    labelled = await asyncio.to_thread(load_labels, labels, state, persona)
    policy = SyncPolicy.from_config(config.persona)
    brain = build_brain(config)
    try:
        embedder = await local_embedder(config)
        judge = choose_judge(config, brain, embedder, policy)
        return await calibrate(labelled, judge, policy)
    finally:
        await brain.aclose()


def _replaced(section: Any, **values: Any) -> Any:
    import dataclasses

    return dataclasses.replace(section, **values)


def cmd_persona(args: argparse.Namespace) -> int:
    config = _config(args)
    data, lines = asyncio.run(_persona(config, args))
    _print(data, args.json, lines)
    return 0


async def _persona(config: Config, args: argparse.Namespace) -> tuple[Any, list[str]]:
    from gateway.store import Store
    from persona.models import RuleStatus
    from persona.state import MergePolicy, PersonaBook, initial_state, load_exemplars

    exemplars = await asyncio.to_thread(load_exemplars, config.persona.exemplars_file)
    policy = MergePolicy(
        alpha=config.persona.trait_alpha,
        decay=config.persona.marker_decay,
        min_weight=config.persona.marker_min_weight,
        top_k=config.persona.marker_top_k,
    )
    async with Store(config.database_url, echo=config.store.echo) as store:
        book = PersonaBook(store, initial_state(exemplars, policy))
        await book.current()
        command = args.persona_command
        if command == "versions":
            versions = await book.versions()
            data: Any = [
                {"version": v.version, "source": v.source, "reason": v.reason, "at": v.created_at}
                for v in versions
            ]
            lines = [
                f"v{v.version:<4} {v.created_at:%Y-%m-%d %H:%M}  {v.source:<9} {v.reason}"
                for v in versions
            ]
            return data, lines
        if command == "show":
            info = await book.current() if args.version is None else await book.get(args.version)
            state = info.state.to_json()
            return {"version": info.version, "state": state}, [
                f"version {info.version} ({info.source}: {info.reason})",
                json.dumps(state, indent=2),
            ]
        if command == "diff":
            changes = await book.diff(args.a, args.b)
            return changes, changes or [f"v{args.a} and v{args.b} are the same"]
        if command == "rollback":
            info = await book.rollback(args.version)
            return {"version": info.version, "reason": info.reason}, [
                f"now at version {info.version}: {info.reason}"
            ]
        if command == "rules":
            status = RuleStatus(args.status) if args.status else None
            rules = await book.rules(status)
            data = [
                {
                    "id": r.rule_id,
                    "status": r.status.value,
                    "text": r.text,
                    "proposed": r.proposed_at,
                }
                for r in rules
            ]
            return data, [f"#{r.rule_id:<4} {r.status.value:<9} {r.text}" for r in rules] or [
                "no rules"
            ]
        if command == "confirm":
            info = await book.confirm_rule(args.rule_id)
            return {"version": info.version}, [
                f"rule {args.rule_id} is now a hard rule (version {info.version})"
            ]
        rule = await book.reject_rule(args.rule_id)
        return {"id": rule.rule_id, "status": rule.status.value}, [
            f"rule {rule.rule_id} rejected: {rule.text}"
        ]
