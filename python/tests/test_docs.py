"""docs/python.md shows the example the tests run, verbatim."""

from conftest import EXAMPLE, REPO

MARK = "<!-- example: python/examples/train_mlp.py -->\n```python\n"


def test_the_documented_example_is_the_tested_one():
    doc = (REPO / "docs" / "python.md").read_text()
    assert MARK in doc, "docs/python.md lost its example block"
    block = doc.split(MARK, 1)[1].split("\n```\n", 1)[0] + "\n"
    assert block == EXAMPLE.read_text(), \
        "docs/python.md differs from python/examples/train_mlp.py; copy the file into it"
