// Tables wider than the page scroll sideways inside Material's `.md-typeset__scrollwrap`, which nothing shows: put a
// hint above each one that does, and take it away when the window grows wide enough (docs/stylesheets/extra.css).
function hintWideTables() {
  for (const box of document.querySelectorAll(".md-typeset__scrollwrap")) {
    const hint = box.previousElementSibling?.classList.contains("hfe-scroll-hint") ? box.previousElementSibling : null;
    const wide = box.scrollWidth > box.clientWidth + 1;
    if (wide && !hint) {
      box.insertAdjacentHTML("beforebegin", '<p class="hfe-scroll-hint">Wider than the page: scroll sideways for ' +
                                            "more columns &rarr;</p>");
    } else if (!wide && hint) {
      hint.remove();
    }
  }
}

document$.subscribe(hintWideTables);  // each page Material shows, instant navigation included
window.addEventListener("resize", hintWideTables);
