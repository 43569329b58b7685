// Typeset the math of every page with the KaTeX shipped in the site (assets/katex).
// pymdownx.arithmatex (generic mode) leaves \( \) and \[ \] inside .arithmatex elements.
document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
    });
  }
});
