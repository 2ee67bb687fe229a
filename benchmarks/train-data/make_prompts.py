#!/usr/bin/env python3
"""Training prompts for an MTP head, made without a dataset (issue 12).

The head learns what the target answers; the benchmark's HumanEval prompts ask it to complete a
Python function from its signature and docstring, a kind of prompt the target's self-written
prompts rarely are. This script writes prompts of that kind from the Python functions found on
the machine (the standard library and installed packages: signature and docstring kept, body
left out), "write a function that ..." prompts from the same docstrings, and writing and
role-play prompts put together from lists (the benchmark's chat set opens with those). None is a
benchmark prompt: functions named as a HumanEval entry point are left out, and the writing lists
are not the chat set's.

Usage: make_prompts.py OUT_DIR [--code N] [--writing N] [--seed S] [--root DIR ...]
Writes OUT_DIR/code.jsonl and OUT_DIR/writing.jsonl ({"id", "category", "prompt"} lines).
"""

import argparse
import ast
import json
import os
import random
import re
import sys
import textwrap

HE_HEADER = (
    "Complete the following Python function. Reply with the whole function in one Python code "
    "block.\n\n```python\n"
)


def benchmark_names(prompts_dir):
    """Entry-point names of the bundled HumanEval prompts (never trained on)."""
    names = set()
    path = os.path.join(prompts_dir, "humaneval.jsonl")
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            names.update(re.findall(r"\ndef (\w+)\(", json.loads(line)["prompt"]))
    return names


def functions(root):
    """(name, signature-and-docstring source, docstring) of the documented functions under root."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", "tests", "test")]
        for f in filenames:
            if not f.endswith(".py") or f.startswith("test"):
                continue
            path = os.path.join(dirpath, f)
            try:
                src = open(path, encoding="utf-8").read()
                tree = ast.parse(src)
            except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
                continue
            lines = src.splitlines()
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                    continue
                doc = ast.get_docstring(node)
                body = node.body
                if not doc or len(body) < 2 or not isinstance(body[0], ast.Expr):
                    continue
                if not 40 <= len(doc) <= 700 or node.decorator_list:
                    continue
                n_body = node.end_lineno - body[1].lineno + 1
                if not 3 <= n_body <= 30:
                    continue
                args = [a.arg for a in node.args.args]
                if args[:1] in (["self"], ["cls"]):
                    continue
                head = lines[node.lineno - 1 : body[0].end_lineno]
                text = textwrap.dedent("\n".join(head))
                if len(text) > 1200 or "\t" in text:
                    continue
                yield node.name, text, doc


def code_prompts(roots, n, rng, skip):
    seen, found = set(), []
    for root in roots:
        for name, text, doc in functions(root):
            if name in skip or name in seen:
                continue
            seen.add(name)
            found.append((name, text, doc))
    rng.shuffle(found)
    out = []
    for name, text, doc in found[:n]:
        first = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
        if rng.random() < 0.75 or len(first) < 20:
            prompt = HE_HEADER + text + "\n```"
        else:
            ask = first[0].lower() + first[1:]
            prompt = f"Write a Python function `{name}` that does the following: {ask}"
        out.append({"id": f"code-{name}", "category": "code", "prompt": prompt})
    return out


FORMS = [
    "a short, friendly email", "a two-paragraph product description", "a limerick",
    "a short poem", "a thank-you note", "a formal letter", "a toast for a wedding",
    "a short story of about 150 words", "a diary entry", "a motivational speech opening",
    "a blog post introduction", "a LinkedIn post", "a restaurant review", "a cover letter opening",
    "a complaint letter", "a recipe introduction", "a travel itinerary for two days",
    "a bedtime story", "a press release headline and lead paragraph", "a haiku",
    "a job advertisement", "a text message", "an apology message", "a birthday card message",
    "a short sonnet", "an advertising slogan and tagline", "a newsletter paragraph",
    "a set of meeting notes", "a eulogy paragraph", "an FAQ with three questions",
]
TOPICS = [
    "a neighbour who helped during a storm", "a new coffee shop opening downtown",
    "learning to play the guitar at forty", "a lost cat found after a week",
    "the first snow of the year", "a team finishing a hard project", "a trip to the mountains",
    "a bicycle that can fold into a backpack", "a community garden", "a retiring teacher",
    "moving to a new city", "a robot that learns to paint", "the last day of summer",
    "a library that stays open all night", "an electric scooter rental service",
    "a grandmother's secret soup recipe", "a marathon run in the rain",
    "a smart thermostat", "a volunteer beach clean-up", "an old lighthouse",
    "a surprise party that went wrong", "a startup selling plant-based snacks",
    "a dog who hates baths", "a power outage on a holiday", "a school science fair",
    "a train journey across Europe", "a kitchen renovation", "a friendship that started online",
    "an ancient map found in an attic", "the opening of a public swimming pool",
    "a noisy upstairs neighbour", "a late delivery of office furniture",
    "a hiking boot that never gets wet", "a city's new bike lanes", "a jazz festival",
]
ROLES = [
    "a museum guide", "a barista", "a pirate captain", "a personal trainer", "a detective",
    "a medieval innkeeper", "a park ranger", "a spaceship's computer", "a travel agent",
    "a kindergarten teacher", "a chef on a cooking show", "a librarian", "a tour guide in Rome",
    "a sports commentator", "a wise old wizard", "a customer-support agent",
    "a job interviewer", "a flight attendant", "a news anchor", "a gardener",
]
TASKS = [
    "greet a new visitor and explain what they can do today",
    "explain your job to a curious ten-year-old",
    "describe the strangest day you ever had at work",
    "give three tips to a beginner",
    "calm down an upset customer",
    "announce an unexpected delay",
    "tell a short story about your first day",
    "persuade someone to try something new",
    "describe the view from where you stand",
    "answer the question: what do you love most about your work?",
]
AUDIENCES = [
    "", " for a group of teenagers", " in a formal tone", " in a playful tone",
    " for busy professionals", " in under 100 words", " for a children's magazine",
]


def writing_prompts(n, rng):
    out = set()
    while len(out) < n:
        if rng.random() < 0.6:
            p = f"Write {rng.choice(FORMS)} about {rng.choice(TOPICS)}{rng.choice(AUDIENCES)}."
        else:
            p = f"Pretend you are {rng.choice(ROLES)}. {rng.choice(TASKS).capitalize()}."
        out.add(p)
    out = sorted(out)
    rng.shuffle(out)
    return [{"id": f"writing-{i}", "category": "writing", "prompt": p} for i, p in enumerate(out)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--code", type=int, default=6000)
    ap.add_argument("--writing", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", action="append", default=None)
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "..", "prompts"))
    a = ap.parse_args()
    roots = a.root or sorted({p for p in sys.path if p.endswith(("python3.11", "site-packages"))})
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    code = code_prompts(roots, a.code, rng, benchmark_names(a.prompts))
    writing = writing_prompts(a.writing, rng)
    for name, rows in (("code", code), ("writing", writing)):
        with open(os.path.join(a.out, name + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"{name}: {len(rows)} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()
