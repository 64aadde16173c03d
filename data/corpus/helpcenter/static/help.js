// Tallyo Help Centre: collapsible tables of contents and "was this helpful" widget.
document.addEventListener("DOMContentLoaded", function () {
  var headings = document.querySelectorAll("main h2");
  var toc = document.createElement("ol");
  headings.forEach(function (h, i) {
    h.id = h.id || "section-" + (i + 1);
    var li = document.createElement("li");
    li.innerHTML = '<a href="#' + h.id + '">' + h.textContent + "</a>";
    toc.appendChild(li);
  });
  var main = document.querySelector("main");
  if (main && headings.length > 2) { main.insertBefore(toc, main.children[1]); }
});
