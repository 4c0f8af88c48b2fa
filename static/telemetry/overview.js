// Fleet overview: each payload (the page's own, then /api/v1/overview.json every 5 s, polled by
// figures.js) gives one heatmap per cluster and the counts of the cluster table.
(function () {
  "use strict";

  function formatNumber(value, digits) {
    return Number(value).toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
  }

  function updateTable(cluster) {
    var rows = document.querySelectorAll("#cluster-table tr[data-cluster]");
    rows.forEach(function (row) {
      if (row.dataset.cluster !== cluster.name) return;
      row.querySelectorAll("[data-field]").forEach(function (cell) {
        var field = cell.dataset.field;
        cell.textContent = formatNumber(cluster[field], field === "power_kw" ? 1 : 0);
      });
    });
  }

  VigilFigures.onPayload(function (payload) {
    var figures = {};
    payload.clusters.forEach(function (cluster) {
      var div = document.querySelector('.heatmap[data-cluster="' + CSS.escape(cluster.name) + '"]');
      if (!div) {
        // A new cluster appeared: its section is rendered by the server.
        window.location.reload();
        return;
      }
      div.dataset.gpus = String(cluster.gpus);
      figures[cluster.name] = cluster.figure;
      updateTable(cluster);
    });
    return figures;
  });
})();
