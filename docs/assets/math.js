// Typeset the math of every page with the KaTeX shipped in the site (assets/katex).
// pymdownx.arithmatex (generic mode) leaves \( \) and \[ \] inside .arithmatex elements; a
// heading's math also reaches the table of contents as its TeX source, so the navigation's
// links that hold some are typeset too.
const MATH_DELIMITERS = [
  { left: "\\(", right: "\\)", display: false },
  { left: "\\[", right: "\\]", display: true },
];

document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, { delimiters: MATH_DELIMITERS });
  }
  for (const link of body.querySelectorAll(".md-nav__link")) {
    if (link.textContent.includes("\\(")) {
      renderMathInElement(link, { delimiters: MATH_DELIMITERS });
    }
  }
});
