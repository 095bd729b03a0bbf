// Tables wider than the page scroll sideways inside Material's `.md-typeset__scrollwrap`, which nothing shows: put a
// hint above each one that does, and take it away when the window grows wide enough (docs/stylesheets/extra.css).
function hintWideTables() {
  for (const box of document.querySelectorAll(".md-typeset__scrollwrap")) {
    const hint = box.previousElementSibling?.classList.contains("hfe-scroll-hint") ? box.previousElementSibling : null;
    // what does not show, less the padding beside the table (Material's `.md-typeset__table`), whatever the scroll
    const wide = box.scrollWidth - box.clientWidth - parseFloat(getComputedStyle(box.firstElementChild).paddingRight) > 1;
    if (wide && !hint) {
      box.insertAdjacentHTML("beforebegin", '<p class="hfe-scroll-hint">Wider than the page: scroll sideways for ' +
                                            "more columns &rarr;</p>");
    } else if (!wide && hint) {
      hint.remove();
    }
  }
}

// A value and its spread ("42.4 ± 16.6") on one line: broken after "±", a column of them reads as a column of pieces.
function keepSpreadsTogether() {
  for (const cell of document.querySelectorAll(".md-typeset td")) {
    if (/^\S+ ± \S+$/.test(cell.textContent.trim())) {
      cell.style.whiteSpace = "nowrap";
    }
  }
}

document$.subscribe(() => {  // each page Material shows, instant navigation included
  keepSpreadsTogether();
  hintWideTables();
});
window.addEventListener("resize", hintWideTables);
