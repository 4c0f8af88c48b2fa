// Fleet overview: each payload (the page's own, then /api/v1/overview.json every 5 s, polled by
// figures.js) gives the counts of the cluster table and one compact grid per cluster, which
// this script turns into a heatmap (webapp/pages/overview.py describes the grid). Hover text,
// row labels and node links are built here, so the payload carries each value once.
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

  function cellTrace(name, z, custom, hover, gpuLevel, extra) {
    return Object.assign({
      type: "heatmap", name: name, z: z, x0: 0, dx: 1, y0: 0, dy: 1, customdata: custom,
      hoverongaps: false, hovertemplate: hover, xgap: 1, ygap: gpuLevel ? 3 : 1,
    }, extra);
  }

  function solid(colour) {
    return [[0, colour], [1, colour]];
  }

  // A node's row label: its hostname, and its state (bold) when it is not up.
  function nodeLabel(host, state) {
    return state ? host + " · <b>" + state + "</b>" : host;
  }

  // One cell per GPU: each node a labelled row of its GPUs, in `columns` columns of nodes
  // (one subplot each, so every row keeps its own label), nodes in hostname order down each
  // column; a cluster of fewer nodes uses as many columns, each as wide, so that a GPU's cell
  // has one size on the whole page. Utilization colours a cell; grey is no data; pink is idle but held by a job;
  // a cross marks an erroring GPU.
  function gpuFigure(grid, payload, divWidth) {
    var n = grid.hosts.length, width = Math.max(grid.width, 1);
    var slots = Math.max(grid.columns, 1), columns = Math.max(Math.min(slots, n), 1);
    var rows = Math.max(Math.ceil(n / columns), 1);
    var urlOf = function (id) { return payload.node_url.replace(/0\/$/, id + "/"); };
    var stale = "stale (no sample in " + payload.stale_after_s + " s)";
    var hover =
      "<b>%{customdata[0]}</b> · %{customdata[1]}<br>status: %{customdata[2]}<br>" +
      "%{customdata[9]}<br>" +
      "util: %{customdata[3]} · SM active: %{customdata[4]}<br>" +
      "power: %{customdata[5]} · temp: %{customdata[6]}<br>memory used: %{customdata[7]}" +
      "<extra>click for the node</extra>";
    var longest = 0;
    grid.hosts.forEach(function (host, k) {
      var state = grid.states[k];
      longest = Math.max(longest, host.length + (state ? state.length + 3 : 0));
    });
    // Room for the row labels left of each column (11 px text: about 6.5 px a character).
    var plotPx = Math.max((divWidth || 1200) - 120, 300);
    var labelFrac = Math.min((longest * 6.5 + 14) / plotPx, 0.6 / slots);
    var gapFrac = 0.012;
    // Each legend entry once, on the first column that has such a cell (plotly leaves out the
    // entry of a heatmap with no cell).
    var legend = {};
    var once = function (key, z) {
      var has = z.some(function (row) { return row.some(function (v) { return v !== null; }); });
      if (!has || legend[key]) return false;
      legend[key] = true;
      return true;
    };
    var data = [], layout = {
      template: look.template,
      height: 95 + Math.max(22 * rows, 100),
      margin: { l: 10, r: 10, t: 30, b: 20 },
      legend: { orientation: "h", x: 0, y: 1.0, yanchor: "bottom", xanchor: "left" },
      meta: { busy_util_pct: payload.busy_util_pct, level: grid.level, columns: columns },
    };
    for (var j = 0; j < columns; j++) {
      var util = blank(rows, width), noData = blank(rows, width), held = blank(rows, width);
      var custom = blank(rows, width), errX = [], errY = [], ticks = [], tickvals = [];
      for (var r = 0; r < rows; r++) {
        var k = j * rows + r;
        if (k >= n) break;
        var host = grid.hosts[k], state = grid.states[k];
        ticks.push(nodeLabel(host, state));
        tickvals.push(r);
        for (var i = 0; i < grid.width; i++) {
          var slot = k * grid.width + i, st = grid.status[slot];
          if (st === "-") continue;
          var job = grid.held[slot] === null ? null : grid.jobs[grid.held[slot]];
          if (st === "s" || grid.util[slot] === null) noData[r][i] = 1;
          else if (st === "i" && job) held[r][i] = 1;
          else util[r][i] = grid.util[slot];
          if (st === "e") { errX.push(i); errY.push(r); }
          var status = st === "s" ? stale : STATUS[st];
          if (st === "i" && job) status = "idle, held by a job";
          if (state) status += " · node " + state;
          custom[r][i] = [
            host, "GPU " + i, status,
            fmt(grid.util[slot], "%"), fmt(grid.sm[slot], "%"), fmt(grid.power[slot], "W"),
            fmt(grid.temp[slot], "°C"), fmt(grid.mem[slot], "GiB", 1), urlOf(grid.node_ids[k]),
            job ? "job " + job[0] + (job[1] ? " · " + job[1] : "") + (job[2] ? " (" + job[2] + ")" : "")
                : "no job holds it",
          ];
        }
      }
      var suffix = j === 0 ? "" : String(j + 1), first = j === 0;
      var axes = { xaxis: "x" + suffix, yaxis: "y" + suffix };
      var left = j / slots + labelFrac, right = (j + 1) / slots - gapFrac;
      layout["xaxis" + suffix] = {
        visible: false, range: [-0.5, width - 0.5], domain: [left, right], anchor: "y" + suffix,
      };
      layout["yaxis" + suffix] = {
        tickmode: "array", tickvals: tickvals, ticktext: ticks, tickfont: { size: 11 },
        range: [rows - 0.5, -0.5], showgrid: false, zeroline: false, anchor: "x" + suffix,
      };
      data.push(
        cellTrace("GPU util (%)", util, custom, hover, true, Object.assign({
          zmin: 0, zmax: 100, colorscale: look.util_colourscale, showlegend: false,
          showscale: first, colorbar: { title: { text: "GPU util (%)" }, thickness: 14, len: 1.0 },
        }, axes)),
        cellTrace("no data (stale > " + payload.stale_after_s + " s)", noData, custom, hover, true,
          Object.assign({ zmin: 0, zmax: 1, colorscale: solid(look.no_data), showscale: false,
                          showlegend: once("nodata", noData), legendgroup: "nodata" }, axes)),
        cellTrace("idle, held by a job", held, custom, hover, true,
          Object.assign({ zmin: 0, zmax: 1, colorscale: solid(look.held_idle), showscale: false,
                          showlegend: once("held", held), legendgroup: "held" }, axes)),
        Object.assign({
          type: "scatter", mode: "markers", x: errX, y: errY, hoverinfo: "skip",
          showlegend: once("erroring", [errX]), legendgroup: "erroring",
          name: "erroring (ECC DBE / row remap)",
          marker: { symbol: "x-thin", size: 8, line: { width: 2, color: look.error } },
        }, axes)
      );
    }
    return { data: data, layout: layout };
  }

  // One cell per node (a cluster too large for a cell per GPU): rows of `per_row` nodes, each
  // row labelled with its first and last node; a cross marks a node with an erroring GPU, a
  // square a node out of service (drained, draining, down).
  function nodeFigure(grid, payload) {
    var perRow = grid.per_row;
    var n = grid.hosts.length;
    var rows = Math.max(Math.ceil(n / perRow), 1);
    var cols = Math.max(Math.min(n, perRow), 1);
    var util = blank(rows, cols), noData = blank(rows, cols), custom = blank(rows, cols);
    var errX = [], errY = [], outX = [], outY = [], ticks = [];
    var urlOf = function (id) { return payload.node_url.replace(/0\/$/, id + "/"); };
    var out = payload.out_of_service || [];

    for (var k = 0; k < n; k++) {
      var r = Math.floor(k / perRow), c = k % perRow, host = grid.hosts[k];
      var state = grid.states[k];
      if (c === 0) {
        var last = grid.hosts[Math.min(k + perRow, n) - 1];
        ticks.push(last === host ? host : host + " … " + last);
      }
      var counts = grid.counts[k], total = counts[0] + counts[1] + counts[2] + counts[3];
      if (grid.util[k] === null) noData[r][c] = 1;
      else util[r][c] = grid.util[k];
      if (counts[2] > 0) { errX.push(c); errY.push(r); }
      if (out.indexOf(state) >= 0) { outX.push(c); outY.push(r); }
      custom[r][c] = [
        host + (state ? " · " + state : ""), total + " GPUs",
        "busy " + counts[0] + " · idle " + counts[1] + " (held by a job " + grid.held_idle[k] +
          ") · erroring " + counts[2] + " · stale " + counts[3],
        fmt(grid.util[k], "%"), fmt(grid.power[k] / 1000, "kW", 1), "", "", "",
        urlOf(grid.node_ids[k]),
      ];
    }
    var hover =
      "<b>%{customdata[0]}</b> · %{customdata[1]}<br>%{customdata[2]}<br>" +
      "mean util: %{customdata[3]} · power: %{customdata[4]}<extra>click for its GPUs</extra>";
    var data = [
      cellTrace("mean GPU util (%)", util, custom, hover, false, {
        zmin: 0, zmax: 100, colorscale: look.util_colourscale, showlegend: false,
        colorbar: { title: { text: "mean GPU util (%)" }, thickness: 14, len: 1.0 },
      }),
      cellTrace("no data (stale > " + payload.stale_after_s + " s)", noData, custom, hover, false, {
        zmin: 0, zmax: 1, colorscale: solid(look.no_data), showscale: false, showlegend: true,
      }),
      {
        type: "scatter", mode: "markers", x: errX, y: errY, hoverinfo: "skip", showlegend: true,
        name: "node with an erroring GPU",
        marker: { symbol: "x-thin", size: 9, line: { width: 2, color: look.error } },
      },
      {
        type: "scatter", mode: "markers", x: outX, y: outY, hoverinfo: "skip", showlegend: true,
        name: "node drained, draining or down",
        marker: { symbol: "square-open", size: 9, line: { width: 2, color: look.held_idle } },
      },
    ];
    var layout = {
      template: look.template,
      height: 95 + Math.max(16 * rows, 100),
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
      figures[cluster.name] = cluster.grid.level === "gpu"
        ? gpuFigure(cluster.grid, payload, div.clientWidth)
        : nodeFigure(cluster.grid, payload);
      updateTable(cluster);
    });
    return figures;
  });
})();
