// jobq dashboard: live refresh, selection, confirmations. No library, nothing fetched
// from elsewhere: the page's own URL is fetched again and its [data-live] regions swapped.
(function () {
  "use strict";
  var KEY = "jobq.dashboard.refresh";
  var select = document.getElementById("refresh");
  var status = document.getElementById("live-status");
  var timer = null;
  var busy = false;

  function seconds() {
    var stored = null;
    try { stored = window.localStorage.getItem(KEY); } catch (e) { /* storage refused */ }
    var fallback = Number(document.body.getAttribute("data-default-refresh") || 2);
    var value = stored === null ? fallback : Number(stored);
    return isNaN(value) ? fallback : value;
  }

  function say(text) { if (status) { status.textContent = text; } }

  function schedule() {
    window.clearTimeout(timer);
    var s = seconds();
    if (!select || s <= 0 || document.hidden) { return; }
    timer = window.setTimeout(refresh, s * 1000);
  }

  function focusKey(el) {
    if (!el || el === document.body) { return null; }
    if (el.id) { return "#" + el.id; }
    if (el.name && el.value !== undefined) { return el.name + "=" + el.value; }
    return null;
  }

  function findByKey(key) {
    if (!key) { return null; }
    if (key.charAt(0) === "#") { return document.getElementById(key.slice(1)); }
    var parts = key.split("=");
    var all = document.getElementsByName(parts[0]);
    for (var i = 0; i < all.length; i++) { if (all[i].value === parts.slice(1).join("=")) { return all[i]; } }
    return null;
  }

  function swap(fresh) {
    var kept = {};
    document.querySelectorAll("input[data-keep]:checked").forEach(function (box) { kept[box.name + "=" + box.value] = true; });
    var active = document.activeElement;
    var typing = active && (active.tagName === "TEXTAREA" || active.tagName === "SELECT" ||
      (active.tagName === "INPUT" && active.type !== "checkbox" && active.type !== "submit"));
    var focused = focusKey(active);
    document.querySelectorAll("[data-live]").forEach(function (region) {
      if (typing && region.contains(active)) { return; } // never under the user's fingers
      var next = fresh.getElementById(region.id);
      if (next && next.innerHTML !== region.innerHTML) { region.innerHTML = next.innerHTML; }
    });
    document.querySelectorAll("input[data-keep]").forEach(function (box) { box.checked = !!kept[box.name + "=" + box.value]; });
    if (focused && document.activeElement !== active) {
      var again = findByKey(focused);
      if (again) { again.focus(); }
    }
    selectionChanged();
  }

  function refresh() {
    if (busy) { return; }
    busy = true;
    fetch(window.location.href, { headers: { "X-Jobq-Live": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) { throw new Error("logged out: reload the page to log in"); }
        if (!response.ok) { throw new Error("refresh failed (" + response.status + ")"); }
        return response.text();
      })
      .then(function (html) {
        swap(new DOMParser().parseFromString(html, "text/html"));
        say("updated " + new Date().toISOString().slice(11, 19) + " UTC");
      })
      .catch(function (error) { say(error.message || "refresh failed"); })
      .then(function () { busy = false; schedule(); });
  }

  function selectionChanged() {
    var boxes = document.querySelectorAll("input[data-keep]");
    var n = 0;
    boxes.forEach(function (box) { if (box.checked) { n += 1; } });
    var all = document.getElementById("all-matching");
    var counter = document.getElementById("selection-count");
    if (counter) {
      var total = document.getElementById("all-count");
      counter.textContent = all && all.checked ? "all " + (total ? total.textContent : "") + " matching selected" : n + " selected";
    }
    var page = document.getElementById("select-page");
    if (page) { page.checked = boxes.length > 0 && n === boxes.length; }
  }

  if (select) {
    select.value = String(seconds());
    if (select.value === "") { select.value = document.body.getAttribute("data-default-refresh") || "2"; }
    select.addEventListener("change", function () {
      try { window.localStorage.setItem(KEY, select.value); } catch (e) { /* storage refused */ }
      say(Number(select.value) > 0 ? "" : "paused");
      schedule();
    });
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { window.clearTimeout(timer); say("paused while hidden"); } else { say(""); refresh(); }
    });
    if (seconds() <= 0) { say("paused"); }
    schedule();
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.id === "select-page") {
      document.querySelectorAll("input[data-keep]").forEach(function (box) { box.checked = target.checked; });
    }
    if (target.id === "select-page" || target.id === "all-matching" || target.hasAttribute("data-keep")) { selectionChanged(); }
  });

  // Confirmation before a form changes something: data-confirm on the form, or
  // data-confirm-selected on the button (with the number of letters selected).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var button = event.submitter;
    var question = form.getAttribute("data-confirm");
    if (button && button.hasAttribute("data-confirm-selected")) {
      var n = document.querySelectorAll("input[data-keep]:checked").length;
      if (n === 0) { event.preventDefault(); window.alert("Select some first."); return; }
      question = button.getAttribute("data-confirm-selected") + " " + n + " selected?";
    }
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });

  selectionChanged();
}());
