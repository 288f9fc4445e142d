#!/usr/bin/env python3
"""The rebase bot: `invoke rebase --latest` unattended, then one pull request through `gh`.

Exit status: 0 rebased, already up to date, or paused; 2 stopped at a conflict
(the rebase is aborted again, the report kept); 1 any other error.

Pausing: a file `.rebase-bot-pause` at the repository root (commit it; its text
says why), REBASE_BOT_PAUSE=1 in the environment, or the label `rebase-bot:pause`
on the bot's open pull request. Everything but the pull-request step works
without GitHub: with no `gh` or no token the result stays on the local branch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_fork.core.errors import ForkError  # noqa: E402
from vllm_fork.rebase import run as rebase  # noqa: E402
from vllm_fork.rebase.state import Options, in_progress  # noqa: E402
from vllm_fork.rebase.target import latest_version  # noqa: E402
from vllm_fork.upstream.pin import load_pin  # noqa: E402

PAUSE_FILE = ".rebase-bot-pause"
LABEL = "rebase-bot"
PAUSE_LABEL = "rebase-bot:pause"
KEPT_REPORT = Path("build") / "rebase-bot-report.md"
GH_CWD = [ROOT]  # gh finds the GitHub repository from the checkout it runs in


def log(msg: str) -> None:
    print(f"rebase-bot: {msg}", flush=True)


def gh_ready() -> bool:
    return bool(shutil.which("gh")) and bool(os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN"))


def gh(*args: str, check: bool = True) -> str:
    env = dict(os.environ)
    env.setdefault("GH_TOKEN", os.environ.get("GITHUB_TOKEN", ""))
    proc = subprocess.run(["gh", *args], cwd=GH_CWD[0], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise ForkError(f"`gh {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc.stdout


def paused(root: Path) -> str | None:
    if (root / PAUSE_FILE).exists():
        return f"{PAUSE_FILE} exists: {(root / PAUSE_FILE).read_text().strip() or 'no reason given'}"
    if os.environ.get("REBASE_BOT_PAUSE") == "1":
        return "REBASE_BOT_PAUSE=1"
    if gh_ready():
        prs = json.loads(gh("pr", "list", "--state", "open", "--label", PAUSE_LABEL, "--json", "number") or "[]")
        if prs:
            return f"label {PAUSE_LABEL} is on pull request #{prs[0]['number']}"
    return None


def step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a") as fh:
            fh.write(text + "\n")


def publish(root: Path, branch: str, report: Path, title: str) -> str:
    """Push the branch and open, or update, the one pull request for it; close older bot PRs."""
    subprocess.run(["git", "-C", str(root), "push", "--force", "origin", f"{branch}:{branch}"], check=True)
    gh("label", "create", LABEL, "--force", "--description", "opened by the rebase bot", check=False)
    mine = json.loads(gh("pr", "list", "--state", "open", "--head", branch, "--json", "number,url") or "[]")
    if mine:
        gh("pr", "edit", str(mine[0]["number"]), "--title", title, "--body-file", str(report))
        url = mine[0]["url"]
    else:
        base = os.environ.get("REBASE_BOT_BASE", "main")
        url = gh(
            "pr",
            "create",
            "--base",
            base,
            "--head",
            branch,
            "--title",
            title,
            "--body-file",
            str(report),
            "--label",
            LABEL,
        ).strip()
    for old in json.loads(
        gh("pr", "list", "--state", "open", "--label", LABEL, "--json", "number,headRefName") or "[]"
    ):
        if old["headRefName"] != branch:
            gh("pr", "close", str(old["number"]), "--comment", f"Superseded by {url}.", check=False)
    return url


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--to", help="a version, tag or commit instead of the newest release")
    ap.add_argument("--source", choices=("pypi", "git"))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument(
        "--seed",
        action="store_true",
        help="seed the ops cache when the compiled inputs changed (publish it with `invoke ops.publish`)",
    )
    ap.add_argument("--root", type=Path, default=ROOT, help="the fork checkout (default: this one)")
    ap.add_argument("--no-publish", action="store_true", help="never push or touch pull requests")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    GH_CWD[0] = root
    try:
        why = paused(root)
        if why:
            log(f"paused ({why}); nothing done")
            return 0
        if in_progress(root):
            log("a stopped rebase was left behind by an earlier run: aborting it first")
            rebase.abort(root)
        pin = load_pin(root)
        target = args.to or latest_version()
        if target.removeprefix("v") == pin.version:
            log(f"already on the newest release, vLLM {pin.version}; nothing to do")
            return 0
        log(f"rebasing vLLM {pin.version} -> {target}")
        outcome = rebase.start(
            root,
            to=target,
            source=args.source,
            options=Options(run_tests=not args.skip_tests, replace_branch=True, seed=args.seed),
        )
    except ForkError as exc:
        log(f"error: {exc}")
        return 1
    kept = root / KEPT_REPORT
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(outcome.report)
    step_summary(outcome.report)
    print(outcome.report)
    if not outcome.done:
        rebase.abort(root)  # unattended: leave nothing half-done; a human reruns it by hand
        why = "the check or the tests failed" if outcome.stopped_at == "checks" else "stopped at a conflict"
        log(f"{why}; aborted again. Report: {kept}. Resolve by hand: docs/rebase.md")
        return 2
    log(f"committed {outcome.commit[:12]} on {outcome.branch}")
    if args.no_publish or not gh_ready():
        log("no `gh` or no token (GH_TOKEN/GITHUB_TOKEN): the branch stays local")
        return 0
    title = f"Rebase onto vLLM {load_pin(root).version}"
    try:
        log(f"pull request: {publish(root, outcome.branch, kept, title)}")
    except (ForkError, subprocess.CalledProcessError) as exc:
        log(f"error publishing: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
