// jobledger admin page: the one script (CSP allows no inline script). Values come from
// data attributes, never from text spliced into code.
"use strict";
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement)) return;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
// a live page (the dashboard with ?live=5) reloads itself; leaving live is a plain link
const live = document.querySelector("[data-refresh-s]");
if (live) {
  const seconds = Number(live.dataset.refreshS);
  if (seconds >= 1) window.setTimeout(() => window.location.reload(), seconds * 1000);
}
