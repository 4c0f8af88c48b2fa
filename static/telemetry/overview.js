// Fleet overview: each payload (the page's own, then /api/v1/overview.json every 5 s, polled by
// figures.js) gives the counts of the cluster table and one compact grid per cluster, which
// this script turns into a heatmap (webapp/telemetry/overview.py describes the grid). Hover
// text and node links are built here, so the payload carries each value once.
(function () {
  "use strict";

  var look = JSON.parse(document.getElementById("overview-look").textContent);
  var STATUS = { b: "busy", i: "idle", e: "erroring", s: "stale" };
  var URL_AT = 8; // customdata index of a cell's node page (data-link on the heatmap divs)

  function formatNumber(value, digits) {
    return Number(value).toLocaleString("en-US", {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
  }

  function fmt(value, unit, digits) {
    if (value === null || value === undefined) return "n/a";
    return formatNumber(value, digits || 0) + " " + unit;
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

  function blank(rows, cols) {
    var out = [];
    for (var r = 0; r < rows; r++) out.push(new Array(cols).fill(null));
    return out;
  }

  // The heatmap of one cluster's grid: utilization, grey "no data" cells, erroring crosses.
  function figure(grid, payload) {
    var gpuLevel = grid.level === "gpu";
    var stride = gpuLevel ? grid.width + 1 : 1; // a gap column after each node's GPUs
    var perRow = grid.per_row;
    var n = grid.hosts.length;
    var rows = Math.max(Math.ceil(n / perRow), 1);
    var cols = Math.max(Math.min(n, perRow) * stride - (gpuLevel ? 1 : 0), 1);
    var util = blank(rows, cols), noData = blank(rows, cols), custom = blank(rows, cols);
    var errX = [], errY = [], ticks = [];
    var urlOf = function (id) { return payload.node_url.replace(/0\/$/, id + "/"); };
    var stale = "stale (no sample in " + payload.stale_after_s + " s)";

    for (var k = 0; k < n; k++) {
      var r = Math.floor(k / perRow), c0 = (k % perRow) * stride, host = grid.hosts[k];
      if (k % perRow === 0) {
        var last = grid.hosts[Math.min(k + perRow, n) - 1];
        ticks.push(last === host ? host : host + " … " + last);
      }
      if (gpuLevel) {
        for (var i = 0; i < grid.width; i++) {
          var slot = k * grid.width + i, st = grid.status[slot];
          if (st === "-") continue;
          var c = c0 + i;
          if (st === "s" || grid.util[slot] === null) noData[r][c] = 1;
          else util[r][c] = grid.util[slot];
          if (st === "e") { errX.push(c); errY.push(r); }
          custom[r][c] = [
            host, "GPU " + i, st === "s" ? stale : STATUS[st],
            fmt(grid.util[slot], "%"), fmt(grid.sm[slot], "%"), fmt(grid.power[slot], "W"),
            fmt(grid.temp[slot], "°C"), fmt(grid.mem[slot], "GiB", 1), urlOf(grid.node_ids[k]),
          ];
        }
      } else {
        var counts = grid.counts[k], total = counts[0] + counts[1] + counts[2] + counts[3];
        if (grid.util[k] === null) noData[r][c0] = 1;
        else util[r][c0] = grid.util[k];
        if (counts[2] > 0) { errX.push(c0); errY.push(r); }
        custom[r][c0] = [
          host, total + " GPUs",
          "busy " + counts[0] + " · idle " + counts[1] + " · erroring " + counts[2] +
            " · stale " + counts[3],
          fmt(grid.util[k], "%"), fmt(grid.power[k] / 1000, "kW", 1), "", "", "",
          urlOf(grid.node_ids[k]),
        ];
      }
    }
    var hover = gpuLevel
      ? "<b>%{customdata[0]}</b> · %{customdata[1]}<br>status: %{customdata[2]}<br>" +
        "util: %{customdata[3]} · SM active: %{customdata[4]}<br>" +
        "power: %{customdata[5]} · temp: %{customdata[6]}<br>memory used: %{customdata[7]}" +
        "<extra>click for the node</extra>"
      : "<b>%{customdata[0]}</b> · %{customdata[1]}<br>%{customdata[2]}<br>" +
        "mean util: %{customdata[3]} · power: %{customdata[4]}<extra>click for its GPUs</extra>";
    var cell = { x0: 0, dx: 1, y0: 0, dy: 1, customdata: custom, hoverongaps: false,
                 hovertemplate: hover, xgap: 1, ygap: gpuLevel ? 3 : 1 };
    var data = [
      Object.assign({
        type: "heatmap", name: gpuLevel ? "GPU util (%)" : "mean GPU util (%)", z: util,
        zmin: 0, zmax: 100, colorscale: look.util_colourscale, showlegend: false,
        colorbar: { title: { text: gpuLevel ? "GPU util (%)" : "mean GPU util (%)" },
                    thickness: 14, len: 1.0 },
      }, cell),
      Object.assign({
        type: "heatmap", name: "no data (stale > " + payload.stale_after_s + " s)", z: noData,
        zmin: 0, zmax: 1, colorscale: [[0, look.no_data], [1, look.no_data]],
        showscale: false, showlegend: true,
      }, cell),
      {
        type: "scatter", mode: "markers", x: errX, y: errY, hoverinfo: "skip", showlegend: true,
        name: gpuLevel ? "erroring (ECC DBE / row remap)" : "node with an erroring GPU",
        marker: { symbol: "x-thin", size: gpuLevel ? 8 : 9,
                  line: { width: 2, color: look.error } },
      },
    ];
    var rowPx = gpuLevel ? 22 : 16;
    var layout = {
      template: look.template,
      height: 95 + Math.max(rowPx * rows, 100),
      margin: { l: 10, r: 10, t: 30, b: 20 },
      xaxis: { visible: false, range: [-0.5, cols - 0.5], fixedrange: false },
      yaxis: {
        tickmode: "array", tickvals: ticks.map(function (_, i) { return i; }), ticktext: ticks,
        range: [rows - 0.5, -0.5], automargin: true, showgrid: false, zeroline: false,
      },
      legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", xanchor: "left" },
      meta: { busy_util_pct: payload.busy_util_pct, level: grid.level },
    };
    return { data: data, layout: layout };
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
      div.dataset.level = cluster.grid.level;
      var label = div.closest(".cluster").querySelector("[data-level-label]");
      if (label) label.textContent = cluster.grid.level === "gpu" ? "one cell per GPU" : "one cell per node";
      div.dataset.link = String(URL_AT);
      figures[cluster.name] = figure(cluster.grid, payload);
      updateTable(cluster);
    });
    return figures;
  });
})();
