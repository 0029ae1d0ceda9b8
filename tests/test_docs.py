"""Every document the repository cites is in the repository: Markdown links, and paths ending in
.md named in any tracked text file (code comments included). Nothing points outside it."""
import re
import subprocess
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MD_PATH = re.compile(r"(?<![\w/.*}-])((?:\.\./|\./)?[\w./-]*[\w-]+\.md)\b")


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (a source tarball): every file
        return [p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [Path(p) for p in out.stdout.splitlines()]


class Docs(unittest.TestCase):
    def test_cited_documents_exist(self):
        missing = []
        for rel in tracked():
            if rel.suffix not in {".md", ".h", ".cpp", ".cu", ".py", ".sh", ".txt", ".cmake",
                                  ".toml"} and rel.name != "run":
                continue
            text = (ROOT / rel).read_text(errors="replace")
            refs = set(LINK.findall(text)) if rel.suffix == ".md" else set()
            refs |= set(MD_PATH.findall(text))
            for ref in refs:
                if re.match(r"^[a-z]+://", ref) or ref.startswith("mailto:"):
                    continue
                if "shared/" in ref and ref.startswith(".."):
                    missing.append(f"{rel}: points outside the repository: {ref}")
                    continue
                here, top = (ROOT / rel.parent / ref).resolve(), (ROOT / ref).resolve()
                if not (here.exists() or top.exists()):
                    # a bare file name (a README.md, say) may mean that file in any step or the root
                    if "/" not in ref and any(p.name == ref for p in tracked()):
                        continue
                    missing.append(f"{rel}: {ref}")
        self.assertEqual(missing, [])

    def test_the_front_doors(self):
        # README.md's first screen (25 lines): the two commands first (tests/test_first_hour.py
        # and .ci/run rely on them), then what this is, the quick start and a picture.
        # docs/README.md opens with the path: the steps in order, whole within 40 lines.
        readme = (ROOT / "README.md").read_text().splitlines()
        commands = [line.split()[0] for line in readme[:6] if line.startswith("    ")]
        self.assertEqual(commands, ["scripts/main.sh", "scripts/test.sh"])
        screen = readme[:25]
        self.assertTrue(any(line.startswith("**Quick start**") for line in screen), screen)
        self.assertTrue(any(line.startswith("![") for line in screen), "no picture on it")
        quick = next(i for i, line in enumerate(readme) if line.startswith("**Quick start**"))
        self.assertTrue(all(line.startswith("    ") for line in readme[quick + 2:quick + 4]),
                        "the quick start's commands follow it")
        self.assertLess(quick + 3, 25, "the quick start's commands are on the first screen")
        course = (ROOT / "docs" / "README.md").read_text().splitlines()[:40]
        self.assertIn("## The path", course)
        self.assertIn("<!-- steps-path:end -->", course)
        chapter = re.compile(r"\]\(\.\./(step\d_\w+)/README\.md\)")
        steps = [m.group(1) for line in course[course.index("## The path"):]
                 if line.startswith("| ") and (m := chapter.search(line))]
        self.assertEqual(steps, sorted(p.name for p in ROOT.glob("step[0-9]_*") if p.is_dir()))


if __name__ == "__main__":
    unittest.main()
