// The figure bootstrap of every page: draws the Plotly figures the server built, follows a
// click on a point to the page it links, and refreshes from a JSON URL when the page asks.
//
// Markup it reads (no inline script, so a strict Content-Security-Policy holds):
//   <div data-figure="NAME">                one Plotly div per figure
//     data-link="N"                         a click opens the URL in the point's customdata[N]
//     data-modebar-remove="select2d …"      mode bar buttons this figure does without
//   {{ figures|json_script:"figures-data" }} (written by templates/includes/figures.html)
//   {NAME: {data, layout}}, drawn on load
//   <div data-refresh-url="URL" data-refresh-ms="5000" data-initial="ID">
//                                           poll URL; a page script turns each payload (and
//                                           the json_script ID's, first) into {NAME: figure}
//                                           with VigilFigures.onPayload(fn)
//   <span data-refresh-status>              says when the last refresh came, or that it failed
(function () {
  "use strict";

  var drawn = new WeakSet();
  var payloadHandler = null;

  function config(div) {
    var remove = (div.dataset.modebarRemove || "").split(/\s+/).filter(Boolean);
    return { displaylogo: false, responsive: true, modeBarButtonsToRemove: remove };
  }

  // A heatmap's click event carries its cell's customdata only inside the trace's 2-D array.
  function customdata(point) {
    if (point.customdata) return point.customdata;
    var cd = point.data.customdata;
    var rc = point.pointNumber;
    return cd && Array.isArray(rc) && cd[rc[0]] ? cd[rc[0]][rc[1]] : null;
  }

  function followLinks(div) {
    if (div.dataset.link === undefined) return;
    var index = Number(div.dataset.link);
    div.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var cd = point && customdata(point);
      if (cd && cd[index]) window.location.href = cd[index];
    });
  }

  function figureDiv(name) {
    return document.querySelector('[data-figure="' + CSS.escape(name) + '"]');
  }

  // Draws each named figure into its div: the first time from scratch, then in place.
  function draw(figures) {
    Object.keys(figures).forEach(function (name) {
      var div = figureDiv(name);
      var fig = figures[name];
      if (!div || !fig) return;
      if (drawn.has(div)) {
        Plotly.react(div, fig.data, fig.layout, config(div));
        return;
      }
      drawn.add(div);
      Plotly.newPlot(div, fig.data, fig.layout, config(div)).then(followLinks);
    });
  }

  function utcTime(date) {
    return date.toISOString().slice(11, 19) + " UTC";
  }

  function poll(root) {
    var url = root.dataset.refreshUrl;
    var ms = Number(root.dataset.refreshMs || 5000);
    var status = document.querySelector("[data-refresh-status]");

    function say(text, failed) {
      if (!status) return;
      status.classList.toggle("error", failed);
      status.textContent = text;
    }

    function show(payload) {
      draw(payloadHandler(payload));
      var at = payload.generated_at ? new Date(payload.generated_at) : new Date();
      say("updated " + utcTime(at) + " · refreshes every " + ms / 1000 + " s", false);
    }

    function refresh() {
      if (document.hidden) {
        window.setTimeout(refresh, ms);
        return;
      }
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
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
        .then(show)
        .catch(function (err) {
          say("update failed at " + utcTime(new Date()) + " (" + err.message + "); retrying", true);
        })
        .finally(function () {
          window.setTimeout(refresh, ms);
        });
    }

    var initial = root.dataset.initial && document.getElementById(root.dataset.initial);
    if (initial) show(JSON.parse(initial.textContent));
    window.setTimeout(refresh, ms);
  }

  function start() {
    var data = document.getElementById("figures-data");
    if (data) draw(JSON.parse(data.textContent));
    var root = document.querySelector("[data-refresh-url]");
    if (root && payloadHandler) poll(root);
  }

  window.VigilFigures = {
    // fn(payload) -> {NAME: figure}: what a refreshing page draws from each JSON payload.
    onPayload: function (fn) {
      payloadHandler = fn;
    },
  };
  // Page scripts come after this one and register before the DOM is complete.
  document.addEventListener("DOMContentLoaded", start);
})();
