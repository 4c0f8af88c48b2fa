// Failure timeline: draws the lane figure; a click on a marker opens that failure's page.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("figures-data").textContent);
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var fig = figures[div.dataset.figure];
    Plotly.newPlot(div, fig.data, fig.layout, { displaylogo: false, responsive: true }).then(function () {
      div.on("plotly_click", function (event) {
        var point = event.points && event.points[0];
        if (point && point.customdata) { window.location.href = point.customdata[0]; }
      });
    });
  });
})();
