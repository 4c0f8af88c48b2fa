// Fleet overview: draws one heatmap per cluster from the figure the server built, then
// refreshes counts and heatmaps from the JSON endpoint every 5 s with Plotly.react.
(function () {
  "use strict";

  var REFRESH_MS = 5000;
  var root = document.getElementById("overview-root");
  var indicator = document.getElementById("last-updated");
  var plotConfig = {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  };
  var drawn = {};

  function heatmapFor(name) {
    var divs = document.querySelectorAll(".heatmap");
    for (var i = 0; i < divs.length; i++) {
      if (divs[i].dataset.cluster === name) return divs[i];
    }
    return null;
  }

  function formatNumber(value, digits) {
    return Number(value).toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
  }

  function cellCustomdata(point) {
    if (point.customdata) return point.customdata;
    var cd = point.data.customdata;
    var rc = point.pointNumber;
    return cd && Array.isArray(rc) && cd[rc[0]] ? cd[rc[0]][rc[1]] : null;
  }

  function onClick(event) {
    var point = event.points && event.points[0];
    var cd = point && cellCustomdata(point);
    if (cd && cd[10]) window.location.href = cd[10];
  }

  function updateTable(cluster) {
    var rows = document.querySelectorAll("#cluster-table tr[data-cluster]");
    rows.forEach(function (row) {
      if (row.dataset.cluster !== cluster.name) return;
      row.querySelectorAll("[data-field]").forEach(function (cell) {
        var field = cell.dataset.field;
        cell.textContent =
          field === "power_kw" ? formatNumber(cluster[field], 1) : formatNumber(cluster[field], 0);
      });
    });
  }

  function showUpdated(payload) {
    var at = new Date(payload.generated_at);
    indicator.classList.remove("error");
    indicator.textContent =
      "updated " + at.toISOString().slice(11, 19) + " UTC · refreshes every 5 s";
  }

  function draw(payload) {
    var reload = false;
    payload.clusters.forEach(function (cluster) {
      var div = heatmapFor(cluster.name);
      if (!div) {
        reload = true; // a new cluster appeared: its section is rendered by the server
        return;
      }
      var fig = cluster.figure;
      if (!drawn[cluster.name]) {
        Plotly.newPlot(div, fig.data, fig.layout, plotConfig).then(function (gd) {
          gd.on("plotly_click", onClick);
        });
        drawn[cluster.name] = true;
      } else {
        Plotly.react(div, fig.data, fig.layout, plotConfig);
      }
      div.dataset.gpus = String(cluster.gpus);
      updateTable(cluster);
    });
    if (reload) window.location.reload();
    showUpdated(payload);
  }

  function refresh() {
    if (document.hidden) {
      window.setTimeout(refresh, REFRESH_MS);
      return;
    }
    fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) {
          // The session ended: go to the login page and come back here afterwards.
          return response.json().then(function (body) {
            window.location.href =
              body.login_url + "?next=" + encodeURIComponent(window.location.pathname);
            throw new Error("session expired");
          });
        }
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(draw)
      .catch(function (err) {
        indicator.classList.add("error");
        indicator.textContent =
          "update failed at " + new Date().toISOString().slice(11, 19) + " UTC (" + err.message +
          "); retrying";
      })
      .finally(function () {
        window.setTimeout(refresh, REFRESH_MS);
      });
  }

  draw(JSON.parse(document.getElementById("overview-data").textContent));
  window.setTimeout(refresh, REFRESH_MS);
})();
