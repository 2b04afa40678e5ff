"""The noising step: plant what web crawls contain, at stated rates, each planted row labelled.

Rates are fractions of the clean pool's document count (so 0.06 with 10,000 clean documents plants
600 rows). Every draw comes from one generator seeded by the build seed, in a fixed order, so a seed
gives the same planted rows. The kinds:
  exact_dup    a clean document copied verbatim (sources drawn uniformly, with replacement)
  near_dup     a clean document with small edits (about 3% of its words deleted, doubled or given a
               typo) and a shuffled pair of boilerplate lines (share bar, cookie note, date line...)
               put before and after it, as a mirror or a re-crawl looks
  boilerplate  a template page (cookie wall, page not found, archive index, paywall, print footer)
               filled with titles of the domain's documents: near-identical rows in bulk
  junk         low-quality text: keyword lists (search spam), word salad with corrupted characters
               from a clean document, or markup/encoding debris
The domain of a planted row is its source document's domain, or, for boilerplate and junk, a domain
drawn in proportion to the domains' clean document counts.
"""

from __future__ import annotations

import re

import numpy as np

from .sources import Document, fineweb_id

KINDS = ("exact_dup", "near_dup", "boilerplate", "junk")
DEFAULT_RATES = {"exact_dup": 0.06, "near_dup": 0.05, "boilerplate": 0.03, "junk": 0.04}
WORD_EDIT_RATE = 0.03

BOILERPLATE_LINES = [
    "Share this page: Facebook | Twitter | Email | Print",
    "We use cookies to improve your experience. By continuing you agree to our cookie policy.",
    "Advertisement",
    "Related articles",
    "Comments (0) | Add a comment",
    "Home > Archive > Page",
    "Posted by admin in Uncategorized",
    "Sign up for our newsletter to get the latest updates.",
    "Copyright (c) All rights reserved.",
    "Last updated: {date}",
    "Skip to main content",
    "Print this page | Bookmark this page",
]

TEMPLATES = [
    ("Skip to main content\nHome | About | Archive | Contact | Search\n\n"
     "We use cookies to give you the best experience on our website. You can change your cookie "
     "settings at any time. Accept all cookies | Manage preferences\n\n{title}\n\n"
     "To continue, please accept cookies or adjust your settings.\n\n"
     "Privacy policy | Terms of use | Accessibility | Site map\nCopyright (c) {year}. "
     "All rights reserved."),
    ("404 - Page not found\n\nSorry, the page you requested ({title}) could not be found. It may "
     "have been moved, renamed or deleted.\n\nPlease check the address, return to the home page, "
     "or use the search box above.\n\nPopular pages:\n{list}\n\nHome | Help | Contact us"),
    ("Archive for {month} {year}\n\n{list}\n\n<< Older entries | Newer entries >>\n\n"
     "Categories: Uncategorized (12) | News (48) | Reference (7)\nTags: {tags}\n\n"
     "Powered by WordPress | Log in | Entries RSS | Comments RSS"),
    ("Subscribe to continue reading\n\n{title}\n\nThis article is for subscribers only. "
     "Subscribe now for unlimited access to all articles, the archive and the newsletter.\n\n"
     "Already a subscriber? Log in\n\nSubscribe | Log in | Help | Terms and conditions | "
     "Privacy\nCopyright (c) {year}"),
    ("Printer-friendly version\n\n{title}\n\nThis page was printed from the web site on "
     "{date}. To view the full page with images, comments and related links visit the original "
     "address.\n\nBack to top | Email this page | Print this page\n\nRelated pages:\n{list}"),
]

SPAM_WORDS = ["free", "best", "cheap", "online", "download", "buy", "top", "review", "2025",
              "discount", "official", "near me", "sale", "pdf", "guide", "tips", "deal", "now"]
DEBRIS = ["<div class=\"widget\">", "</div>", "&nbsp;", "&amp;nbsp;", "var _gaq = _gaq || [];",
          "function(){return!0}", "Ã©", "â€™", "â€œ", "Â", "ï»¿", "[object Object]", "undefined",
          "NaN", "{{ content }}", "<br/><br/>", "%20", "\\u00e9", "<!-- ad slot -->"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]


def plant(clean: list[Document], rates: dict[str, float], seed: int) -> list[tuple[Document, str]]:
    """The planted rows, each with its kind, in kind order; `clean` is left untouched."""
    rng = np.random.default_rng([seed, 16])
    n = len(clean)
    domains = sorted({d.domain for d in clean})
    by_domain = {dom: [i for i, d in enumerate(clean) if d.domain == dom] for dom in domains}
    weights = np.array([len(by_domain[d]) for d in domains], dtype=float) / n
    titles = {dom: [_title(clean[i].text) for i in idx] for dom, idx in by_domain.items()}
    planted = []
    for kind in KINDS:
        count = round(rates[kind] * n)
        for k in range(count):
            if kind in ("exact_dup", "near_dup"):
                source = clean[int(rng.integers(n))]
                domain = source.domain
                text = source.text if kind == "exact_dup" else near_duplicate(source.text, rng)
            else:
                domain = domains[int(rng.choice(len(domains), p=weights))]
                if kind == "boilerplate":
                    text = template_page(titles[domain], rng)
                else:
                    donor = clean[by_domain[domain][int(rng.integers(len(by_domain[domain])))]]
                    text = junk_page(donor.text, rng)
            key = f"datamask-pool/seed={seed}/{kind}/{k}"
            planted.append((Document(domain, key, text, fineweb_id(key)), kind))
    return planted


def _title(text: str) -> str:
    first = text.strip().split("\n", 1)[0].strip(" *=#.")
    return first[:80] or "Untitled"


def _date(rng: np.random.Generator) -> str:
    day, month = int(rng.integers(1, 29)), MONTHS[int(rng.integers(12))]
    return f"{day} {month} {int(rng.integers(2003, 2025))}"


def near_duplicate(text: str, rng: np.random.Generator) -> str:
    """Small word edits plus a boilerplate line above and below, in a shuffled choice."""
    words = text.split(" ")
    edited = []
    for word in words:
        if rng.random() >= WORD_EDIT_RATE or not word:
            edited.append(word)
            continue
        action = int(rng.integers(3))
        if action == 1:
            edited += [word, word]
        elif action == 2 and len(word) > 3:
            i = int(rng.integers(len(word) - 1))
            edited.append(word[:i] + word[i + 1] + word[i] + word[i + 2:])
        # action 0 (and a short word's typo): the word is dropped
    body = " ".join(edited)
    if body == text:  # a very short text drew no edit: drop its last word
        body = text.rsplit(" ", 1)[0]
    header, footer = rng.choice(len(BOILERPLATE_LINES), 2, replace=False)
    fill = {"date": _date(rng)}
    return (f"{BOILERPLATE_LINES[header].format(**fill)}\n\n{body}\n\n"
            f"{BOILERPLATE_LINES[footer].format(**fill)}")


def template_page(titles: list[str], rng: np.random.Generator) -> str:
    template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    picks = [titles[int(i)] for i in rng.integers(len(titles), size=int(rng.integers(5, 16)))]
    tags = ", ".join(sorted({w.lower() for t in picks[:4] for w in re.findall(r"[A-Za-z]{4,}", t)}))
    return template.format(title=picks[0], list="\n".join(f"- {t} (read more)" for t in picks),
                           tags=tags or "general", month=MONTHS[int(rng.integers(12))],
                           year=int(rng.integers(2003, 2025)), date=_date(rng))


def junk_page(donor: str, rng: np.random.Generator, length: int | None = None) -> str:
    """One of: a keyword list, word salad with corrupted characters, markup/encoding debris.
    With `length`, pieces of the drawn style are joined until the text reaches it, then cut to
    exactly `length` characters (the calibration's junk replaces a document of that length);
    without it the draws are those the pool was built with, so a seed keeps its pool."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", donor) or ["page"]
    style = JUNK_STYLES[int(rng.integers(len(JUNK_STYLES)))]
    text = style(words, rng)
    if length is None:
        return text
    while len(text) < length:
        text += "\n" + style(words, rng)
    return text[:length]


def _keyword_list(words: list[str], rng: np.random.Generator) -> str:
    """Search spam: the donor's longer words mixed with spam words, comma-listed."""
    vocab = sorted({w.lower() for w in words if len(w) > 4}) or words
    n = int(rng.integers(60, 250))
    picks = [vocab[int(i)] if rng.random() < 0.6 else SPAM_WORDS[int(rng.integers(len(SPAM_WORDS)))]
             for i in rng.integers(len(vocab), size=n)]
    return ", ".join(picks)


def _word_salad(words: list[str], rng: np.random.Generator) -> str:
    """The donor's words shuffled, a tenth of the characters replaced."""
    salad = list(" ".join(rng.permutation(words)))
    hit = np.flatnonzero(rng.random(len(salad)) < 0.1)
    alphabet = "xqzjkw#@%&*~^|0123456789"
    for i in hit:
        salad[i] = alphabet[int(rng.integers(len(alphabet)))]
    return "".join(salad)


def _debris(words: list[str], rng: np.random.Generator) -> str:
    """Markup and encoding debris with a few words of the donor between."""
    n = int(rng.integers(80, 300))
    parts = [DEBRIS[int(i)] if rng.random() < 0.7 else words[int(rng.integers(len(words)))]
             for i in rng.integers(len(DEBRIS), size=n)]
    return " ".join(parts)


JUNK_STYLES = (_keyword_list, _word_salad, _debris)
