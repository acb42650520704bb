"""``agentgw bench drift``: does the persona loop catch a drifting model and bring it back?

A scripted 60-turn conversation runs through the real router, pipeline,
stages and store. The reply brain answers in the persona's voice until turn
20; from then until turn 44 a drift pressure pushes it a little further each
turn: flattering openers, formal padding, headers and bullets, and an emoji
that breaks the confirmed hard rule "Never use emojis". The brain reads its
own prompt and responds to the persona loop: a reinforcement pulls it back a
little, anchors in the history more, a new rebase resets it — so what the
benchmark measures is the loop's detection and the effect of its actions.

The judge is the local one (embeddings and features) or, with
``--judge llm``, the LLM judge through the real Anthropic SDK against the
fake Anthropic API on loopback. The fake's "model" scores the reply it is
shown with the local feature scorer and answers JSON (now and then
malformed, to exercise the retry), so that run measures the LLM judge's
plumbing — parsing, retries, second samples, latency through HTTP — not a
real model's judgement.

Per turn it prints the drift put into the reply, the SyncScore, EWMA, tier
and the action taken; overall ``detected_at_turn`` (first verdict off "ok"
from the onset), ``recovered_after_turns`` (turns from detection until the
EWMA is back in "ok"), ``false_alarms`` (actions on turns whose three
previous replies had not drifted) and the same run with the planner off as
a control.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.bench.report import Target, print_verdicts, progress
from gateway.brains.base import BlockKind, Brain, BrainRequest
from gateway.brains.scripted import ScriptedBrain
from gateway.config import Config, load_config
from gateway.context import ClockStage, PersonaStage, RecentHistoryStage, load_persona
from gateway.hub import ConversationHub
from gateway.messages import Inbound
from gateway.pipeline import PipelineSettings, TurnPipeline
from gateway.router import Router
from gateway.store import Store
from gateway.store.models import Turn
from gateway.supervisor import TaskSupervisor
from persona.anchor import NOTE_OPEN, REBASE_PREFIX, REINFORCE_PREFIX
from persona.build import build_persona_loop
from persona.judge import (
    Judge,
    JudgeInput,
    SyncPolicy,
)
from persona.judge_llm import LLMJudge
from persona.judge_local import score_locally
from persona.loop import PersonaLoop
from persona.models import PersonaAction, SyncScoreRow
from persona.state import HardRule, MergePolicy, PersonaState, initial_state, load_exemplars

TURNS = 60
ONSET = 20
PRESSURE_UNTIL = 44
PRESSURE = 0.15
PULL = {"reinforce": 0.15, "anchor": 0.35}
HARD_RULE = "Never use emojis"

QUESTIONS = [
    "Can you help me plan my week?",
    "What should I cook tonight with rice and spinach?",
    "Is it worth learning Rust this year?",
    "My sister is visiting on Saturday, any ideas?",
    "How do I stop procrastinating on my thesis?",
    "Should I take the job offer in Lyon?",
    "What is a good way to start running again?",
    "Can you explain what an index does in a database?",
    "I keep waking up at 4am. Any advice?",
    "How do I tell my boss I need a day off?",
    "Which is better for notes, paper or an app?",
    "My plant's leaves are turning yellow. Why?",
]
IN_VOICE = [
    "Start with the two things that have deadlines, then block one quiet morning for the rest.",
    "Fry the rice with garlic, wilt the spinach in at the end, and put an egg on top.",
    "Yes, if you write systems code. If you mostly write scripts, probably not yet.",
    "Take her to the market in the morning and keep the afternoon free. Does she like walking?",
    "Work on it for twenty minutes first thing, before email. Small and daily beats long and rare.",
    "Depends on what you would leave behind. What pulls you toward Lyon?",
    "Walk-run for two weeks: one minute running, two walking. Then stretch the running.",
    "It is a sorted lookup table, so the database finds rows without reading all of them.",
    "Keep the room cool and dark, and no screens for the last hour. Is it every night?",
    "Ask plainly and early, and say how the work will be covered. Most bosses respect that.",
    "Paper if you think while writing; an app if you need to search later.",
    "Usually too much water. Let the soil dry out between waterings and check the drainage.",
]
OPENERS = [
    "Great question! ",
    "Absolutely, I'm thrilled to help with this wonderful question! ",
]
PADDING = [
    "Furthermore, it is important to note that there are numerous factors to consider.",
    "Moreover, each of these considerations shall be examined comprehensively.",
    "Additionally, it should be noted that outcomes may vary depending on circumstances.",
    "Consequently, I would like to take this opportunity to provide a comprehensive overview.",
    "In conclusion, do not hesitate to reach out should you require further assistance.",
]


@dataclass(frozen=True)
class DriftScript:
    """When the drift pressure starts and stops, and how much it adds per turn."""

    onset: int = ONSET
    pressure_until: int = PRESSURE_UNTIL
    pressure: float = PRESSURE

    def as_dict(self) -> dict[str, Any]:
        return {
            "onset": self.onset,
            "pressure_until": self.pressure_until,
            "pressure": self.pressure,
        }


# The loop's variants compared by ``--variants`` (issue 28, drift recovery): each is a
# set of persona config values over the defaults; the first is the loop as it was.
VARIANTS: dict[str, dict[str, Any]] = {
    "before_issue_28": {"escalate_when_falling": False, "reseed_after_rebase": False},
    "escalate_when_falling": {"escalate_when_falling": True, "reseed_after_rebase": False},
    "reseed_after_rebase": {"escalate_when_falling": False, "reseed_after_rebase": True},
    "lambda_recovering_0.5": {
        "escalate_when_falling": False,
        "reseed_after_rebase": False,
        "score_lambda_recovering": 0.5,
    },
    "lambda_recovering_0.6": {
        "escalate_when_falling": False,
        "reseed_after_rebase": False,
        "score_lambda_recovering": 0.6,
    },
    "lambda_0.5_both_ways": {
        "escalate_when_falling": False,
        "reseed_after_rebase": False,
        "score_lambda": 0.5,
    },
    # The defaults since issue 28.
    "escalate+reseed": {"escalate_when_falling": True, "reseed_after_rebase": True},
    "escalate+reseed+hold": {
        "escalate_when_falling": True,
        "reseed_after_rebase": True,
        "hold_anchors_until_ok": True,
    },
    "escalate+reseed+recovering_0.5": {
        "escalate_when_falling": True,
        "reseed_after_rebase": True,
        "score_lambda_recovering": 0.5,
    },
}


@dataclass
class DriftingReplies:
    """The reply brain's script: in voice, then drifting, and responsive to the persona loop."""

    script: DriftScript = field(default_factory=DriftScript)
    drift: float = 0.0
    turn: int = 0
    seen_rebase: str = ""
    log: list[dict[str, Any]] = field(default_factory=list)

    def correction(self, request: BrainRequest) -> str:
        guidance = "\n".join(b.text for b in request.system if b.kind is BlockKind.GUIDANCE)
        rebase = guidance[guidance.find(REBASE_PREFIX) :] if REBASE_PREFIX in guidance else ""
        if rebase and rebase != self.seen_rebase:
            self.seen_rebase = rebase
            return "rebase"
        if any(NOTE_OPEN in m.text for m in request.messages):
            return "anchor"
        if REINFORCE_PREFIX in guidance:
            return "reinforce"
        return ""

    def __call__(self, request: BrainRequest) -> str:
        self.turn += 1
        seen = self.correction(request)
        if seen == "rebase":
            self.drift = 0.0
        elif seen:
            self.drift -= PULL[seen]
        if self.script.onset <= self.turn <= self.script.pressure_until:
            self.drift += self.script.pressure
        self.drift = max(0.0, min(1.0, round(self.drift, 4)))
        self.log.append({"turn": self.turn, "drift": self.drift, "seen": seen or None})
        return drifted_reply(IN_VOICE[(self.turn - 1) % len(IN_VOICE)], self.drift)


def drifted_reply(base: str, drift: float) -> str:
    if drift <= 0:
        return base
    parts = []
    if drift >= 0.2:
        parts.append(OPENERS[1] if drift >= 0.5 else OPENERS[0])
    parts.append(base)
    padding = PADDING[: round(drift * len(PADDING))]
    if padding:
        parts.append(" " + " ".join(padding))
    text = "".join(parts)
    if drift >= 0.6:
        text = f"## Overview\n{text}\n\n## Key points\n- **First**\n- **Second**\n- **Third**"
    if drift >= 0.4:
        text += " 🎉"
    return text


async def _settle(router: Router, loop: PersonaLoop) -> None:
    """The turn, then the judge and observer it started: the next prompt sees their verdict."""
    await router.drain(120)
    await loop.idle(120)


async def run_conversation(
    config: Config, judge: Judge, *, anchors: bool, script: DriftScript | None = None
) -> dict[str, Any]:
    """One 60-turn conversation through the real pipeline; the per-turn record and summary."""
    script = script or DriftScript()
    if not anchors:
        # The control: same judge, but the planner never acts.
        config = config.replace(persona=_with(config.persona, warmup_turns=10**6))
    replies = DriftingReplies(script)
    brain = ScriptedBrain(script=[replies] * TURNS, chunk_chars=400)
    persona_text = await asyncio.to_thread(
        load_persona, config.agent.persona_file, config.agent.name
    )
    async with Store(config.database_url) as store:
        supervisor = TaskSupervisor()
        try:
            loop = build_persona_loop(
                config,
                store,
                brain,
                supervisor,
                persona_text=persona_text,
                judge=judge,
            )
            rule = await loop.book.propose_rule(HARD_RULE)
            await loop.book.confirm_rule(rule.rule_id)
            pipeline = TurnPipeline(
                store,
                brain,
                [
                    PersonaStage(persona_text),
                    ClockStage(),
                    RecentHistoryStage(
                        config.context.history_tokens,
                        int(config.context.history_tokens * config.context.history_step_share),
                    ),
                    *loop.context_stages,
                ],
                ConversationHub(),
                PipelineSettings(
                    max_tokens=config.brain.reply_max_tokens,
                    temperature=None,
                    timeout_s=config.brain.timeout_s,
                    history_max_messages=config.context.history_max_messages,
                ),
                after_stages=loop.after_stages,
            )
            router = Router(store, pipeline, ConversationHub(), supervisor)
            start = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
            started = time.perf_counter()
            label = "with anchors" if anchors else "control, no anchors"
            with progress(TURNS, label, "turn") as bar:
                for n in range(TURNS):
                    text = QUESTIONS[n % len(QUESTIONS)]
                    when = start + timedelta(minutes=3 * n)
                    await router.accept(Inbound("bench", "drift-bench", text, when, f"t{n}"))
                    await _settle(router, loop)
                    bar.update()
            elapsed = time.perf_counter() - started
            async with store.session() as session:
                turn_ids = (await session.scalars(select(Turn.id).order_by(Turn.id))).all()
                verdicts = {
                    v.turn_id: v for v in (await session.scalars(select(SyncScoreRow))).all()
                }
                actions = {
                    a.turn_id: a for a in (await session.scalars(select(PersonaAction))).all()
                }
        finally:
            await supervisor.aclose()
    rows = []
    for index, turn_id in enumerate(turn_ids):
        verdict = verdicts.get(turn_id)
        action = actions.get(turn_id)
        rows.append(
            {
                "turn": index + 1,
                "drift": replies.log[index]["drift"],
                "score": _round(verdict.composite if verdict else None),
                "ewma": _round(verdict.ewma if verdict else None),
                "tier": verdict.tier if verdict else None,
                "status": verdict.status.value if verdict else None,
                "action": action.kind.value if action else None,
            }
        )
    judged = list(verdicts.values())
    return {
        "turns": rows,
        "summary": summarise(rows, script.onset),
        "judge": judged[0].judge if judged else None,
        "judge_latency_ms_mean": _round(statistics.fmean(v.latency_ms for v in judged), 2),
        "judge_cost_usd": round(sum(v.cost_usd for v in judged), 6),
        "malformed_verdicts": sum(1 for v in judged if v.status.value == "malformed"),
        # Malformed first answers the judge asked again (and then got JSON, or not).
        "malformed_answers": sum(int(v.detail.get("malformed_answers", 0)) for v in judged),
        "second_samples": sum(1 for v in judged if v.samples > 1),
        "wall_s": round(elapsed, 2),
    }


def summarise(rows: list[dict[str, Any]], onset: int = ONSET) -> dict[str, Any]:
    detected = next(
        (r["turn"] for r in rows if r["turn"] >= onset and r["tier"] not in (None, "ok")), None
    )
    recovered = None
    if detected is not None:
        back = next((r["turn"] for r in rows if r["turn"] > detected and r["tier"] == "ok"), None)
        recovered = None if back is None else back - detected
    false_alarms = []
    for row in rows:
        if row["action"] is None:
            continue
        before = [r["drift"] for r in rows if row["turn"] - 3 <= r["turn"] < row["turn"]]
        if not any(d > 0 for d in before):
            false_alarms.append(row["turn"])
    # Times the EWMA left "ok" again after it had come back (the loop let go too soon).
    relapses = 0
    if recovered is not None and detected is not None:
        tiers = [r["tier"] for r in rows if r["turn"] >= detected + recovered]
        relapses = sum(
            1 for a, b in itertools.pairwise(tiers) if a == "ok" and b not in (None, "ok")
        )
    kinds: dict[str, int] = {}
    for row in rows:
        if row["action"]:
            kinds[row["action"]] = kinds.get(row["action"], 0) + 1
    drifted = [r for r in rows if r["drift"] > 0]
    return {
        "onset_turn": onset,
        "detected_at_turn": detected,
        "first_action_turn": next(
            (r["turn"] for r in rows if r["action"] and r["turn"] >= onset), None
        ),
        "recovered_after_turns": recovered,
        # First reply the judge scored back at or above the ok line after detection
        # (what the loop's actions achieved, before the EWMA's memory of the drift).
        "first_reply_in_ok_after": _first_reply_ok(rows, detected),
        "relapses": relapses,
        "false_alarms": len(false_alarms),
        "false_alarm_turns": false_alarms,
        "actions": kinds,
        "drifted_replies": len(drifted),
        "mean_drift_after_onset": _round(
            statistics.fmean(r["drift"] for r in rows if r["turn"] >= onset), 3
        ),
        "final_ewma": rows[-1]["ewma"] if rows else None,
        "turns_in_ok_after_onset": sum(1 for r in rows if r["turn"] >= onset and r["tier"] == "ok"),
    }


def _first_reply_ok(
    rows: list[dict[str, Any]], detected: int | None, line: float = 0.7
) -> int | None:
    if detected is None:
        return None
    back = next(
        (
            r["turn"]
            for r in rows
            if r["turn"] > detected and r["score"] is not None and r["score"] >= line
        ),
        None,
    )
    return None if back is None else back - detected


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _with(section: Any, **values: Any) -> Any:
    import dataclasses

    return dataclasses.replace(section, **values)


Closer = Callable[[], Awaitable[None]]


async def local_judge(config: Config) -> tuple[Judge, Closer]:
    from persona.build import local_embedder
    from persona.build import local_judge as gateway_local_judge

    embedder = await local_embedder(config)
    # As the gateway builds it (the reply embedded as the memory stores it).
    judge = await asyncio.to_thread(gateway_local_judge, config, embedder)

    async def close() -> None:
        return None

    return judge, close


async def llm_judge(config: Config) -> tuple[Judge, Closer]:
    """The LLM judge: ``ClaudeBrain`` and the real Anthropic SDK against the fake API."""
    from gateway.brains.claude import ClaudeBrain
    from gateway.testing.fake_anthropic import FakeAnthropic

    model = FakeJudgeModel()
    fake = FakeAnthropic(reply=model.answer_payload)
    await fake.start()
    try:
        claude = ClaudeBrain.from_config(
            config.replace(anthropic_api_key="bench-key", anthropic_base_url=fake.base_url)
        )
    except BaseException:
        await fake.close()
        raise

    async def close() -> None:
        await claude.aclose()
        await fake.close()

    return _llm_judge(config, claude), close


def _llm_judge(config: Config, brain: Brain) -> Judge:
    return LLMJudge(
        brain,
        SyncPolicy.from_config(config.persona),
        max_tokens=config.persona.judge_max_tokens,
        input_usd_per_mtok=config.persona.utility_input_usd_per_mtok,
        output_usd_per_mtok=config.persona.utility_output_usd_per_mtok,
    )


JUDGES = {"local": local_judge, "llm": llm_judge}


async def _one(config: Config, kind: str, *, anchors: bool, script: DriftScript) -> dict[str, Any]:
    judge, close = await JUDGES[kind](config)
    try:
        with tempfile.TemporaryDirectory(prefix="agentgw-bench-drift-") as folder:
            run_config = config.replace(store=_with(config.store, data_dir=folder, url=""))
            return await run_conversation(run_config, judge, anchors=anchors, script=script)
    finally:
        await close()


async def run(config: Config, kind: str, script: DriftScript | None = None) -> dict[str, Any]:
    script = script or DriftScript()
    result: dict[str, Any] = {"judge_kind": kind, "script": script.as_dict()}
    for name, anchors in (("with_anchors", True), ("control_no_anchors", False)):
        result[name] = await _one(config, kind, anchors=anchors, script=script)
    return result


VARIANT_COLUMNS = (
    "detected_at_turn",
    "first_reply_in_ok_after",
    "recovered_after_turns",
    "relapses",
    "false_alarms",
    "mean_drift_after_onset",
    "actions",
)


async def run_variants(config: Config, kind: str, script: DriftScript) -> dict[str, Any]:
    """Each variant of the loop on the same script and judge, then the control once."""
    rows: dict[str, Any] = {}
    for name, values in VARIANTS.items():
        variant = config.replace(persona=_with(config.persona, **values))
        summary = (await _one(variant, kind, anchors=True, script=script))["summary"]
        rows[name] = {"config": values, **{k: summary[k] for k in VARIANT_COLUMNS}}
    control = (await _one(config, kind, anchors=False, script=script))["summary"]
    return {
        "judge_kind": kind,
        "script": script.as_dict(),
        "variants": rows,
        "control_mean_drift_after_onset": control["mean_drift_after_onset"],
    }


def _script(args: argparse.Namespace) -> DriftScript:
    onset = getattr(args, "onset", None) or ONSET
    until = getattr(args, "pressure_until", None) or PRESSURE_UNTIL
    pressure = getattr(args, "pressure", None) or PRESSURE
    if not 4 < onset <= until < TURNS:
        raise SystemExit(f"--onset and --pressure-until must satisfy 4 < onset <= until < {TURNS}")
    if not 0 < pressure <= 1:
        raise SystemExit("--pressure must be in (0, 1]")
    return DriftScript(onset, until, pressure)


def bench_config(args: argparse.Namespace) -> Config:
    path: Path | None = getattr(args, "config", None)
    if path is None:
        empty = Path(tempfile.mkdtemp(prefix="agentgw-bench-config-")) / "agentgw.toml"
        empty.touch()
        path = empty
    # The observer is the rule-based one in both runs, so only the judge differs.
    return load_config(
        path, env={}, overrides={"brain": {"kind": "scripted"}, "observe": {"observer": "rules"}}
    )


def main(args: argparse.Namespace) -> int:
    config = bench_config(args)
    script = _script(args)
    if getattr(args, "variants", False):
        table = asyncio.run(run_variants(config, args.judge, script))
        if args.json:
            print(json.dumps(table, indent=2))
        else:
            print(f"== variants, judge {args.judge}, script {table['script']}")
            for name, row in table["variants"].items():
                cells = " ".join(f"{k}={row[k]}" for k in VARIANT_COLUMNS)
                print(f"{name:>32}: {cells}")
            print(f"control mean drift after onset: {table['control_mean_drift_after_onset']}")
        return 0
    result = asyncio.run(run(config, args.judge, script))
    targets = drift_targets(result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        runs = ("with_anchors", "control_no_anchors")
        for name in runs:
            print(f"== {name}: turn by turn (judge {result[name]['judge']})")
            for row in result[name]["turns"]:
                print(
                    f"turn {row['turn']:>2} drift {row['drift']:.2f} score {row['score']} "
                    f"ewma {row['ewma']} {row['tier']:<8} {row['action'] or ''}"
                )
        # The summaries last, where a person looks once the turns have scrolled by.
        for name in runs:
            print(f"== {name}: summary")
            for key, value in result[name]["summary"].items():
                print(f"{key:>26}: {value}")
    print_verdicts(targets, as_json_output=args.json)
    return 0


def drift_targets(result: dict[str, Any]) -> list[Target]:
    """What the bench is for: drift is seen, the anchors bring the voice back
    without acting on turns that had not drifted, and they beat the control."""
    ours = result["with_anchors"]["summary"]
    control = result["control_no_anchors"]["summary"]
    detected, recovered = ours["detected_at_turn"], ours["recovered_after_turns"]
    return [
        Target(
            f"drift detected after its onset at turn {ours['onset_turn']}",
            detected is not None,
            "never" if detected is None else f"turn {detected}",
        ),
        Target(
            "with anchors, back in the ok tier",
            recovered is not None,
            "never" if recovered is None else f"after {recovered} turns",
        ),
        Target("no false alarms", ours["false_alarms"] == 0, str(ours["false_alarms"])),
        Target(
            "anchors lower the drift after onset below the control's",
            ours["mean_drift_after_onset"] < control["mean_drift_after_onset"],
            f"{ours['mean_drift_after_onset']} against {control['mean_drift_after_onset']}",
        ),
    ]


# -- the fake judge model behind the fake Anthropic API ----------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _section(body: str, title: str, following: tuple[str, ...]) -> str:
    start = body.find(title)
    if start < 0:
        return ""
    start += len(title)
    ends = [body.find(t, start) for t in following if body.find(t, start) >= 0]
    return body[start : min(ends) if ends else len(body)].strip()


@dataclass
class FakeJudgeModel:
    """Answers the LLM judge's request the way a model would: JSON scores.

    The scores come from the local feature scorer applied to the reply and the
    hard rules that the judge prompt shows; every ``malformed_every``-th answer
    is prose instead of JSON, to exercise the judge's one retry.
    """

    malformed_every: int = 12
    calls: int = 0
    _base: PersonaState | None = None

    def answer_text(self, system: str, body: str) -> str:
        self.calls += 1
        if self.malformed_every and self.calls % self.malformed_every == 0:
            return "The reply mostly fits the persona; I'd give it a seven."
        reply = _section(body, "THE REPLY TO JUDGE:\n", ())
        pack = _section(body, "MEMORY PACK given to the assistant:\n", ("OBSERVATIONS given",))
        user = _section(body, "THE PERSON'S MESSAGE:\n", ("THE REPLY TO JUDGE:",))
        rules = [
            line[2:].strip()
            for line in _section(system, "(always follow them):\n", ("\n\n",)).splitlines()
            if line.startswith("- ")
        ]
        if self._base is None:
            self._base = initial_state(load_exemplars(), MergePolicy())
        state = replace(
            self._base, hard_rules=tuple(HardRule(i, r) for i, r in enumerate(rules, 1))
        )
        scores, _detail = score_locally(JudgeInput(reply, user, pack, "", (), system, state), None)
        return json.dumps({**{k: round(v, 3) for k, v in scores.as_dict().items()}, "notes": "ok"})

    def answer_payload(self, payload: dict[str, Any]) -> str:
        """For the fake Anthropic API: the Messages API request body."""
        messages = payload.get("messages", [])
        body = _text_of(messages[0].get("content", "")) if messages else ""
        return self.answer_text(_text_of(payload.get("system", "")), body)
