"""Scripts/function-lengths, which CI runs over Sources/, measures functions as its header
says: from the line of the keyword to the closing brace, braces in strings and comments
ignored, and exits 1 only when one is longer than the limit."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest

from support import PACKAGE_ROOT

SCRIPT = os.path.join(os.path.dirname(PACKAGE_ROOT), "Scripts", "function-lengths")


def function(keyword_line: str, body_lines: int, indent: str = "    ") -> str:
    """A function of `body_lines + 2` lines: its keyword line, a body, its closing brace.

    Each body line holds a brace in a string or a comment, which must not count.
    """
    body = []
    for index in range(body_lines):
        if index % 3 == 0:
            body.append(f'{indent}    let s{index} = "}}"  // }}')
        elif index % 3 == 1:
            body.append(f'{indent}    /* {{ */ let r{index} = #"\\(x) }}"#')
        else:
            body.append(f"{indent}    _ = s0")
    return "\n".join([f"{indent}{keyword_line} {{", *body, f"{indent}}}"]) + "\n"


FIXTURE = (
    "struct Fixture {\n"
    + function("func sixtyOne()", 59)
    + function("func sixty()", 58)
    + function("init(value: Int = 1)", 59)
    + function("var computed: Int", 61)
    + "    var stored: Int = 0\n"
    + '    let text = """\n    func inAString() {\n    }\n    """\n'
    + "}\n"
    + "protocol Requirement {\n    func required()\n    var property: Int { get }\n}\n"
)


@unittest.skipUnless(os.path.exists(SCRIPT), "Scripts/ is not beside the package (installed alone)")
class FunctionLengthsTests(unittest.TestCase):
    def run_script(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, SCRIPT, *arguments], capture_output=True, text=True, timeout=60)

    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.path = os.path.join(directory.name, "Fixture.swift")
        with open(self.path, "w", encoding="utf-8") as file:
            file.write(FIXTURE)

    def test_lists_the_functions_over_sixty_lines_longest_first_and_fails(self) -> None:
        result = self.run_script(self.path)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(
            result.stdout.splitlines(),
            [
                f"{self.path}:184 Fixture.computed 63",
                f"{self.path}:2 Fixture.sixtyOne 61",
                f"{self.path}:123 Fixture.init 61",
            ],
        )

    def test_a_higher_limit_passes(self) -> None:
        result = self.run_script("--limit", "63", self.path)
        self.assertEqual((result.returncode, result.stdout), (0, ""), result.stderr)

    def test_sixty_lines_pass_and_sixty_one_fail(self) -> None:
        result = self.run_script("--limit", "61", self.path)
        self.assertEqual(result.stdout.splitlines(), [f"{self.path}:184 Fixture.computed 63"])
        result = self.run_script("--limit", "62", self.path)
        self.assertEqual(result.stdout.splitlines(), [f"{self.path}:184 Fixture.computed 63"])
        single = os.path.join(os.path.dirname(self.path), "Sixty.swift")
        with open(single, "w", encoding="utf-8") as file:
            file.write(function("func sixty()", 58, indent=""))
        self.assertEqual(self.run_script(single).returncode, 0)
        with open(single, "w", encoding="utf-8") as file:
            file.write(function("func sixtyOne()", 59, indent=""))
        result = self.run_script(single)
        self.assertEqual((result.returncode, result.stdout), (1, f"{single}:1 sixtyOne 61\n"))


if __name__ == "__main__":
    unittest.main()
