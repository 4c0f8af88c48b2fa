// Failure page: draws every figure the server built, one div per figure.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("figures-data").textContent);
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true });
  });
})();
