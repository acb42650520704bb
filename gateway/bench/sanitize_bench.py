"""``agentgw bench sanitize``: the red-team list, false positives on LoCoMo, and speed.

Three figures for ``memory/sanitize.py``:

- the red-team list (``memory/redteam.py``): each attack neutralised or not,
  with the rules that fired;
- false positives: of every turn of the LoCoMo conversations in ``--data``
  (ordinary chat, none of it an attack), on how many a rule fires, which rules,
  and the first few altered turns to read; apart, how many hold a line break
  inside (folded to " / ", which changes no word);
- speed: microseconds per ``sanitize`` call over those turns (``--repeat``
  passes, the best taken), as a pack pays it per candidate.

``--compare FILE`` runs the same on another version of ``memory/sanitize.py``
(``git show REF:memory/sanitize.py > FILE``), in the same process, so the two
are measured side by side on a noisy machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.bench.locomo_bench import load_conversation
from gateway.errors import ConfigError
from memory import sanitize as current
from memory.redteam import ATTACKS, ORDINARY, neutralised

Sanitizer = Callable[[str], Any]
_BREAKS = re.compile(r"[\n\r\x0b\x0c\x85\u2028\u2029]")


def load_sanitizer(path: Path) -> Sanitizer:
    """``sanitize`` of another copy of memory/sanitize.py."""
    spec = importlib.util.spec_from_file_location("agentgw_bench_other_sanitize", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"--compare {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up while being made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    found: Sanitizer = module.sanitize
    return found


def measure(sanitize: Sanitizer, turns: Sequence[str], repeat: int) -> dict[str, Any]:
    redteam = []
    for attack in ATTACKS:
        result = sanitize(attack.text)
        redteam.append(
            {
                "name": attack.name,
                "first_round": attack.first_round,
                "neutralised": neutralised(attack, result.text),
                "rules": list(result.rules),
            }
        )
    results = [(text, sanitize(text)) for text in turns]
    # A rule that fires on an ordinary turn is a false positive; a line break inside
    # a turn folded to " / " is the quoting working (reported apart).
    altered = [(text, result) for text, result in results if result.rules]
    folded = sum(1 for text, _ in results if _BREAKS.search(text.strip()))
    rules = Counter(rule for _, result in altered for rule in result.rules)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in turns:
            sanitize(text)
        best = min(best, time.perf_counter() - start)
    return {
        "redteam_neutralised": sum(r["neutralised"] for r in redteam),
        "redteam_total": len(redteam),
        "first_round_neutralised": sum(r["neutralised"] for r in redteam if r["first_round"]),
        "first_round_total": sum(1 for r in redteam if r["first_round"]),
        "ordinary_altered": sum(1 for text in ORDINARY if sanitize(text).text != text),
        "ordinary_total": len(ORDINARY),
        "locomo_turns": len(turns),
        "locomo_altered": len(altered),
        "locomo_folded": folded,
        "locomo_rules": dict(rules.most_common()),
        "locomo_altered_examples": [
            {"before": text, "after": result.text} for text, result in altered[:8]
        ],
        "us_per_call": round(best / max(1, len(turns)) * 1e6, 3),
        "redteam": redteam,
    }


def main(args: argparse.Namespace) -> int:
    files = sorted(Path(args.data).glob("conv-*.json"))
    if not files:
        raise ConfigError(f"--data {args.data}: no conv-*.json files")
    if args.repeat < 1:
        raise ConfigError("--repeat must be 1 or more")
    turns = [turn.text for path in files for turn in load_conversation(path).turns]
    result: dict[str, Any] = {"current": measure(current.sanitize, turns, args.repeat)}
    if args.compare is not None:
        other = load_sanitizer(Path(args.compare))
        result["compared"] = measure(other, turns, args.repeat)
        result["us_per_call_ratio"] = round(
            result["current"]["us_per_call"] / max(result["compared"]["us_per_call"], 1e-9), 3
        )
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    for label, figures in result.items():
        if not isinstance(figures, dict):
            print(f"{label}: {figures}")
            continue
        print(f"[{label}]")
        for attack in figures["redteam"]:
            mark = "neutralised" if attack["neutralised"] else "REACHED THE PROMPT"
            print(f"  {attack['name']:28} {mark:20} {', '.join(attack['rules'])}")
        for key, value in figures.items():
            if key not in ("redteam", "locomo_altered_examples"):
                print(f"  {key}: {value}")
        for example in figures["locomo_altered_examples"]:
            print(f"  altered: {example['before']!r}\n       -> {example['after']!r}")
    return 0
