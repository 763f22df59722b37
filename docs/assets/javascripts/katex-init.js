// Render the \( ... \) and \[ ... \] spans that pymdownx.arithmatex (generic mode) leaves in the page.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\[", right: "\\]", display: true },
        { left: "\\(", right: "\\)", display: false },
      ],
      throwOnError: false,
    });
  });
});
