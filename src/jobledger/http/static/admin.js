// jobledger admin page: the one script (CSP allows no inline script). Values come from
// data attributes, never from text spliced into code.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement)) return;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
