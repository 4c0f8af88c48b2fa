// Node page: draws the per-GPU series figure the server built (one panel per metric).
(function () {
  "use strict";
  var fig = JSON.parse(document.getElementById("figure-data").textContent);
  Plotly.newPlot(document.getElementById("series-figure"), fig.data, fig.layout, {
    displaylogo: false,
    responsive: true,
  });
})();
