"""CTest for one exercise (scripts/exercise.py): as shipped it must fail its check (its blanks are
real), and with its blanks filled by the step's own lines it must be the step's kernel, byte for
byte (the step's attention.cu, or its rung's file), and pass. Solved, the check runs its first
case alone (--first-case): the kernel is then the step's own binary, which the step's matrix
tests run in full; the one case shows the check runs it as the exercise says (its rung, its
counters).

    exercise_test.py NAME shipped|solved BUILD_DIR
"""
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL = [sys.executable, str(ROOT / "scripts" / "exercise.py")]


def main(name, mode, build):
    with tempfile.TemporaryDirectory() as ws:
        subprocess.run(TOOL + ["start", name, "--dir", ws], check=True)
        if mode == "solved":
            subprocess.run(TOOL + ["solve", name, "--dir", ws], check=True)
            sys.path.insert(0, str(ROOT / "scripts"))
            import exercise
            source = exercise.load(name)["source"]
            if Path(ws, "attention.cu").read_text() != source.read_text():
                print(f"{name}: solved, the kernel is not {source.relative_to(ROOT)}")
                return 1
        first = ["--first-case"] if mode == "solved" else []
        r = subprocess.run(TOOL + ["check", name, "--dir", ws, "--build", build, "--no-build"]
                           + first, capture_output=True, text=True)
        print(r.stdout + r.stderr)
        want = 0 if mode == "solved" else 1
        if r.returncode != want:
            print(f"{name} {mode}: check exited {r.returncode}, expected {want}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
