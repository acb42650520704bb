"""``agentgw lessons list|add|rm|enable|disable``: the lessons from the shell.

They go straight to the store, so they work while the gateway runs: its next
turn reads the lessons again. ``gateway/cli.py`` calls ``add_commands``.
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
from persona.lessons.book import LessonInfo


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    with_config: Callable[[argparse.ArgumentParser], None],
) -> None:
    lessons = sub.add_parser("lessons", help="lessons learned from corrections")
    lessons_sub = lessons.add_subparsers(dest="lessons_command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = lessons_sub.add_parser(name, help=help_text)
        with_config(parser)
        parser.add_argument(
            "--json", action="store_true", help="print JSON instead of text (default: text)"
        )
        parser.set_defaults(func=cmd_lessons)
        return parser

    listed = command("list", "list lessons, newest first")
    listed.add_argument(
        "--person",
        type=int,
        default=None,
        help="only this person's own lessons (default: everyone's, the global ones too)",
    )
    listed.add_argument(
        "--global", dest="only_global", action="store_true", help="only the global lessons"
    )
    add = command("add", "add a lesson (global unless --person)")
    add.add_argument("text", help='the lesson, an imperative: "Do not use emojis."')
    add.add_argument("--person", type=int, default=None, help="the person's id (default: all)")
    add.add_argument("--slot", default="", help="what it is about; a newer one replaces it")
    rm = command("rm", "delete a lesson for good")
    rm.add_argument("lesson_id", type=int, help="the lesson's id, as listed")
    for name, help_text in (
        ("enable", "put a lesson back in the prompt"),
        ("disable", "take a lesson out of the prompt, kept"),
    ):
        toggle = command(name, help_text)
        toggle.add_argument("lesson_id", type=int, help="the lesson's id, as listed")


def lesson_json(lesson: LessonInfo) -> dict[str, Any]:
    return {
        "id": lesson.lesson_id,
        "person_id": lesson.person_id,
        "text": lesson.text,
        "slot": lesson.slot,
        "origin": lesson.origin.value,
        "author": lesson.author,
        "enabled": lesson.enabled,
        "hits": lesson.hits,
        "replaced_by": lesson.replaced_by,
        "source_message_id": lesson.source_message_id,
        "source_text": lesson.source_text,
        "created_at": lesson.created_at.isoformat(),
    }


def _line(lesson: LessonInfo) -> str:
    who = "everyone" if lesson.person_id is None else f"person {lesson.person_id}"
    state = (
        f"replaced by #{lesson.replaced_by}"
        if lesson.replaced_by is not None
        else ("on" if lesson.enabled else "off")
    )
    return f"#{lesson.lesson_id:<4} {who:<11} {state:<15} {lesson.origin.value:<10} {lesson.text}"


def cmd_lessons(args: argparse.Namespace) -> int:
    path: Path | None = getattr(args, "config", None)
    config = load_config(path)
    data, lines = asyncio.run(_lessons(config, args))
    text = json.dumps(data, indent=2) if args.json else "\n".join(lines)
    sys.stdout.write(text + "\n")
    return 0


async def _lessons(config: Config, args: argparse.Namespace) -> tuple[Any, list[str]]:
    from gateway.store import Store
    from persona.lessons.stages import build_book
    from persona.models import LessonOrigin

    async with Store(config.database_url, echo=config.store.echo) as store:
        book = build_book(config.lessons, store, None)
        command = args.lessons_command
        if command == "list":
            if args.only_global:
                found = await book.listed(None, everyone=False)
            elif args.person is not None:
                found = await book.listed(args.person, everyone=False)
            else:
                found = await book.listed()
            return [lesson_json(x) for x in found], [_line(x) for x in found] or ["no lessons"]
        if command == "add":
            learned = await book.learn(
                args.text,
                person_id=args.person,
                slot=args.slot,
                origin=LessonOrigin.MANUAL,
                author="cli",
            )
            line = f"{learned.action} #{learned.lesson.lesson_id}: {learned.lesson.text}"
            if learned.replaced:
                line += f" (replaces {', '.join(f'#{i}' for i in learned.replaced)})"
            return {**lesson_json(learned.lesson), "action": learned.action}, [line]
        if command == "rm":
            gone = await book.delete(args.lesson_id)
            return lesson_json(gone), [f"deleted #{gone.lesson_id}: {gone.text}"]
        changed = await book.update(args.lesson_id, enabled=command == "enable")
        return lesson_json(changed), [_line(changed)]
