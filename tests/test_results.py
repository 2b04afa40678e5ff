"""The committed results and the report made from them: findings.md is exactly what `make
findings` writes from the results folders, every results folder is cited by some page, and every
link of those pages resolves (a file or folder that exists, and a heading where it names one)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_docs import DOCS, LINK, dead_links, without_code_blocks

from reproduce.experiments import claims, findings
from reproduce.experiments.records import read_result

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "reproduce" / "results"
RESULT_PAGES = sorted(RESULTS.rglob("*.md"))


def linked_paths(page: Path) -> list[Path]:
    """What each relative link of `page` points at (web links and pure anchors skipped)."""
    targets = LINK.findall(without_code_blocks(page.read_text()))
    return [(page.parent / t.partition("#")[0]).resolve() for t in targets
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_committed_findings_are_what_make_findings_writes():
    rows = findings.decided(str(RESULTS))
    assert findings.report(rows, str(RESULTS)) == (RESULTS / "findings.md").read_text()


def test_the_front_page_block_is_what_make_findings_writes(tmp_path):
    page = tmp_path / "README.md"
    page.write_text((ROOT / "README.md").read_text())
    findings.fill_readme(str(page), findings.decided(str(RESULTS)), "reproduce/results")
    assert page.read_text() == (ROOT / "README.md").read_text()


@pytest.mark.parametrize("page", RESULT_PAGES, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_link_of_the_results_pages_resolves(page):
    """The front page's and docs/' links are checked by test_docs; these are the results'."""
    assert dead_links(page) == []


def test_every_results_folder_is_cited():
    """Each folder holding results files is linked from a page other than its own README, itself
    or through the run folder it belongs to (a folder two levels down or deeper: a question's
    folder alone covers nothing below it), so superseded runs leave the tree."""
    cited = set()
    for page in DOCS + RESULT_PAGES:
        for target in linked_paths(page):
            folder = target if target.is_dir() else target.parent
            if not (page.name == "README.md" and page.parent == folder):
                cited.add(folder)
    runs = {c for c in cited if RESULTS in c.parents and len(c.relative_to(RESULTS).parts) >= 2}
    folders = {path.parent for path in RESULTS.rglob("*") if path.is_file()} - {RESULTS}
    uncited = sorted(str(f.relative_to(RESULTS)) for f in folders
                     if f not in cited and not runs & set(f.parents))
    assert uncited == []


def test_each_question_folder_has_a_readme():
    questions = [p for p in RESULTS.iterdir() if p.is_dir()]
    assert [p.name for p in questions if not (p / "README.md").is_file()] == []


def test_claims_table_opens_findings_with_the_papers_claims():
    text = (RESULTS / "findings.md").read_text()
    table = text.split("## The paper's claims", 1)[1].split("##", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) >= 8
    for row in rows:
        claim, paper, here, verdict, evidence, target = row.strip("|").split(" | ")
        assert paper.strip() not in ("", "-") and "not measured" not in here
        assert verdict.startswith("**") and evidence.startswith("[") and target.startswith("`make")


def test_every_declared_claim_names_a_rule_and_folders_that_exist():
    for claim in claims.load_claims():
        assert callable(claims.MEASURES[claim.decide])
        assert all((RESULTS / folder).is_dir() for folder in claim.evidence), claim.question


def test_a_claim_naming_no_rule_is_refused_by_name(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("- {question: Q, paper: '-', evidence: [x], target: t, rule: r, "
                   "decide: no_such_rule}\n")
    with pytest.raises(claims.UserError, match="no_such_rule"):
        claims.load_claims(str(bad))


def test_every_results_file_reads_back_as_the_record_it_is():
    """Files of older runs included: each timing, sweep, clusters and length-bias file reads as
    its record and writes back the same."""
    files = [p for p in RESULTS.rglob("*.json")
             if p.stem in ("timing", "clusters", "length-bias") or p.stem.startswith("ablation-")]
    assert len(files) > 20
    for path in files:
        record = read_result(str(path.parent), path.stem)
        assert type(record).from_json(record.to_json()) == record, path
