// Job page: draws the allocation timeline and the per-GPU series the server built.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("figures-data").textContent);
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true });
  });
})();
