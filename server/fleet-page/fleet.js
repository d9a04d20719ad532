// The fleet page: every badge's firmware state, the releases and their canaries, promote, and the
// staged rollout (rollout.js).
// It asks for an API key and keeps it in this module's memory only (no storage, no cookies),
// sends it as a bearer token to the /v1 API of the server that served the page, and writes
// everything it got from the API as text (textContent), never as HTML.

import { cell, el, icon, listUnusable, showMessage, timeText } from "./dom.js";
import { renderRollout } from "./rollout.js";

const PAGE_SIZE = 50;
const REFRESH_MS = 30_000;
const RETRY_MS = 3_000;

const STATES = {
  failed: "Failed",
  no_report: "No report",
  updating: "Updating",
  outdated: "Outdated",
  unreleased: "Unreleased",
  unknown: "Unknown",
  current: "Current",
  revoked: "Revoked",
};

const $ = (id) => document.getElementById(id);

const view = {
  key: null,
  connected: true,
  /** cursors of the pages before the one shown; the last is the shown page's own */
  cursors: [null],
  filters: { state: "", room: "", model: "", sort: "state", order: "asc" },
  /** each load gets a number; an answer to an older load is dropped */
  loadNumber: 0,
  refreshTimer: undefined,
  retryTimer: undefined,
  promoting: null,
};

/** A network failure (the server is gone), as opposed to an answer. */
class Disconnected extends Error {}
/** The key was refused (401) or lacks a scope the page cannot work without (403). */
class KeyRefused extends Error {}

async function api(method, path, body, idempotencyKey) {
  const headers = { authorization: `Bearer ${view.key}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "omit", cache: "no-store" });
  } catch {
    throw new Disconnected("the server does not answer");
  }
  let json;
  try {
    json = await response.json();
  } catch {
    throw new Disconnected(`the server answered HTTP ${response.status} without JSON`);
  }
  if (response.status === 401) throw new KeyRefused(`The server refused this key: ${json.error?.message ?? "not a valid API key"}`);
  return { status: response.status, body: json };
}

function stateBadge(state) {
  return el("span", { className: `state state-${state}` }, [icon(state), el("span", { text: STATES[state] ?? state })]);
}

function reportText(report) {
  if (!report) return el("span", { text: "none yet" });
  const word = report.outcome === "ok" ? `ok ${report.version}` : `error ${report.version}`;
  const outcome = el("span", { className: `outcome outcome-${report.outcome}` }, [icon(report.outcome === "ok" ? "current" : "failed"), el("span", { text: word })]);
  return el("span", {}, [outcome, report.message ? el("span", { className: "sub", text: report.message }) : null, el("span", { className: "sub" }, [timeText(report.received_at)])]);
}

/** The last report, or for a badge that fetched an image since, the fetch it has not reported on. */
function outcomeText(firmware) {
  const fetch = firmware.last_fetch;
  if (!fetch || (firmware.state !== "updating" && firmware.state !== "no_report")) return reportText(firmware.last_report);
  const kib = (bytes) => Math.floor(bytes / 1024);
  const sent = `fetched ${fetch.version}: ${kib(fetch.bytes_sent)} of ${kib(fetch.size)} KiB sent`;
  return el("span", {}, [el("span", { text: sent }), el("span", { className: "sub", text: "no report since" }), el("span", { className: "sub" }, [timeText(fetch.ended_at ?? fetch.started_at)])]);
}

// ---- connection state ----

function showConnection() {
  const status = $("connection");
  status.hidden = false;
  status.replaceChildren();
  if (view.connected) {
    status.className = "connection connected";
    status.append(icon("current"), el("span", { text: `Connected · updated ${new Date().toLocaleTimeString()}` }));
  } else {
    status.className = "connection disconnected";
    status.append(icon("disconnected"), el("span", { text: `Disconnected: the server does not answer. Retrying every ${RETRY_MS / 1000} s; what is shown may be out of date.` }));
  }
}

function disconnected() {
  view.connected = false;
  showConnection();
  clearTimeout(view.retryTimer);
  view.retryTimer = setTimeout(() => loadAll(), RETRY_MS);
}

function askForKey(message) {
  view.key = null;
  clearTimeout(view.refreshTimer);
  clearTimeout(view.retryTimer);
  $("fleet").hidden = true;
  $("session-actions").hidden = true;
  $("connection").hidden = true;
  $("key-panel").hidden = false;
  $("key-error").textContent = message ?? "";
  // What the last key was told (a refusal, a missing scope) is not about the next one.
  showReleaseMessage("", false);
  $("key-input").value = "";
  $("key-input").focus();
}

// ---- loading ----

function devicesQuery() {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE), sort: view.filters.sort, order: view.filters.order });
  for (const name of ["state", "room", "model"]) if (view.filters[name]) params.set(name, view.filters[name]);
  const cursor = view.cursors.at(-1);
  if (cursor) params.set("cursor", cursor);
  return `/v1/devices?${params}`;
}

async function loadAll() {
  const number = ++view.loadNumber;
  clearTimeout(view.refreshTimer);
  clearTimeout(view.retryTimer);
  try {
    const [devices, releases, rollouts] = await Promise.all([api("GET", devicesQuery()), api("GET", "/v1/releases"), api("GET", "/v1/rollouts")]);
    if (number !== view.loadNumber || view.key === null) return;
    if (devices.status === 403) throw new KeyRefused(`This key cannot list badges: ${devices.body.error.message} Use a key with devices:read.`);
    if (devices.status !== 200) {
      // A cursor from before a filter change or a restart: start again from the first page.
      if (devices.body.error?.code === "cursor_invalid" && view.cursors.length > 1) {
        view.cursors = [null];
        return loadAll();
      }
      throw new Error(devices.body.error?.message ?? `HTTP ${devices.status}`);
    }
    view.connected = true;
    renderCounts(devices.body.state_counts);
    renderDevices(devices.body);
    renderReleases(releases);
    renderRollout(rollouts, { api, reload: loadAll, failed: apiFailed });
    showConnection();
    view.refreshTimer = setTimeout(() => loadAll(), REFRESH_MS);
  } catch (error) {
    if (number !== view.loadNumber) return;
    if (error instanceof KeyRefused) return askForKey(`${error.message} Enter another key.`);
    if (error instanceof Disconnected) return disconnected();
    $("page-info").textContent = `Could not load the badges: ${error.message}`;
  }
}

// ---- rendering ----

/**
 * Re-renders a part of the page and, if the focus was on a control inside it, puts it back on the
 * new control that stands for the same thing, so a refresh never throws a keyboard user out.
 */
function keepingFocus(container, attribute, render) {
  const focused = document.activeElement;
  const value = container.contains(focused) ? focused.getAttribute(attribute) : null;
  render();
  if (value !== null) container.querySelector(`[${attribute}="${CSS.escape(value)}"]`)?.focus();
}

function renderCounts(counts) {
  const list = $("state-counts");
  keepingFocus(list, "data-state", () =>
    list.replaceChildren(
      ...Object.keys(STATES).map((state) => {
        const button = el("button", { attrs: { type: "button", "aria-pressed": String(view.filters.state === state), "data-state": state } }, [
          stateBadge(state),
          el("span", { className: "count", text: String(counts[state] ?? 0) }),
        ]);
        button.addEventListener("click", () => {
          view.filters.state = view.filters.state === state ? "" : state;
          $("filter-state").value = view.filters.state;
          view.cursors = [null];
          loadAll();
        });
        return el("li", {}, [button]);
      }),
    ),
  );
}

function renderDevices(page) {
  const rows = page.data.map((device) => {
    const firmware = device.firmware;
    const installed = firmware.installed
      ? el("span", {}, [el("span", { text: firmware.installed.version }), firmware.target_version ? el("span", { className: "sub", text: `target ${firmware.target_version}` }) : null])
      : el("span", { text: "not known yet" });
    const battery =
      device.battery.volts === null
        ? el("span", { text: "not known yet" })
        : el("span", {}, [el("span", { text: `${device.battery.volts.toFixed(2)} V` }), el("span", { className: "sub", text: device.battery.charging ? "charging" : "on battery" })]);
    const lastSeen = [device.last_check_at, device.last_sync_at].filter(Boolean).sort().at(-1) ?? null;
    return el("tr", { attrs: { "data-device": device.id } }, [
      cell("Badge", [el("span", { className: "name", text: device.name }), el("span", { className: "sub", text: `${device.room} · ${device.model} · ${device.id}` })]),
      cell("State", [stateBadge(firmware.state)]),
      cell("Installed", [installed]),
      cell("Last outcome", [outcomeText(firmware)]),
      cell("Battery", [battery]),
      cell("Last seen", [timeText(lastSeen)]),
    ]);
  });
  $("devices-table").querySelector("tbody").replaceChildren(...rows);
  const first = (view.cursors.length - 1) * PAGE_SIZE;
  const pages = Math.max(1, Math.ceil(page.total_count / PAGE_SIZE));
  const filtered = view.filters.state || view.filters.room || view.filters.model ? " matching the filters" : "";
  $("page-info").textContent =
    page.total_count === 0
      ? `No badges${filtered}.`
      : `Badges ${first + 1}–${first + page.data.length} of ${page.total_count}${filtered} (page ${view.cursors.length} of ${pages})`;
  $("prev-page").disabled = view.cursors.length === 1;
  $("next-page").disabled = !page.has_more;
  $("next-page").dataset.cursor = page.next_cursor ?? "";
}

function renderReleases(answer) {
  const body = $("releases-table").querySelector("tbody");
  if (listUnusable(answer, "releases", "releases:read", "releases-message", body)) return;
  // A key sees its own mode's releases only: say which, so a test key's list is never taken for the live fleet's.
  const mode = answer.body.livemode ? "live" : "test";
  $("releases-heading").textContent = `Releases (${mode} mode)`;
  if (answer.body.data.length === 0) {
    body.replaceChildren(el("tr", {}, [el("td", { text: `No ${mode}-mode release published yet.`, attrs: { colspan: "5" } })]));
    return;
  }
  keepingFocus(body, "data-promote", () => body.replaceChildren(...answer.body.data.map(releaseRow)));
}

function releaseRow(release) {
  const audience =
    release.role === "fleet"
      ? el("strong", { text: "The whole fleet" })
      : release.role === "canary"
        ? el("span", {}, [el("span", { text: "Canary badge " }), el("span", { className: "name", text: release.canary.name ?? release.canary.id }), el("span", { className: "sub", text: release.canary.room ? `${release.canary.room} · ${release.canary.id}` : release.canary.id })])
        : el("span", { text: release.promoted ? "Promoted earlier" : "No longer offered" });
  let action = el("span", { text: "—" });
  if (release.role === "canary") {
    const button = el("button", { text: `Promote ${release.version}`, attrs: { type: "button", "data-promote": release.version } });
    button.addEventListener("click", () => promote(release.version));
    const waiting = release.promotion?.allowed ? "The canary reported ok." : (release.promotion?.refusal?.message ?? "");
    action = el("span", {}, [button, el("span", { className: "sub", text: waiting })]);
  }
  return el("tr", { attrs: { "data-release": release.version } }, [
    cell("Version", [el("strong", { text: release.version }), release.notes.length ? el("span", { className: "sub", text: release.notes.join(" · ") }) : null]),
    cell("Offered to", [audience]),
    cell("Published", [timeText(release.published_at)]),
    cell("Canary's last report", [release.canary ? reportText(release.canary.last_report) : el("span", { text: "no canary" })]),
    cell("Promote", [action]),
  ]);
}

const showReleaseMessage = (text, refused) => showMessage("releases-message", text, refused);

// ---- promote ----

/** A write's call failed: a refused key is asked for again, a lost server shown; anything else is a bug. */
function apiFailed(error) {
  if (error instanceof KeyRefused) return askForKey(`${error.message} Enter another key.`);
  if (error instanceof Disconnected) return disconnected();
  throw error;
}

async function promote(version, force) {
  // One key per attempt: a refusal is kept for its key, and the next attempt is a new request.
  const idempotencyKey = `fleet-page-promote-${version}-${crypto.randomUUID()}`;
  const body = force ? { force: true, reason: force.reason } : {};
  let answer;
  try {
    answer = await api("POST", `/v1/releases/${encodeURIComponent(version)}/promote`, body, idempotencyKey);
  } catch (error) {
    return apiFailed(error);
  }
  const dialog = $("promote-dialog");
  if (answer.status === 200) {
    if (dialog.open) dialog.close();
    const how = answer.body.promoted?.forced ? "forced without the canary's report" : "the canary reported ok";
    showReleaseMessage(`${version} is now the fleet's release (${how}).`, false);
    return loadAll();
  }
  const error = answer.body.error ?? { message: `HTTP ${answer.status}` };
  if (error.code === "canary_not_confirmed" && !force) {
    view.promoting = version;
    $("promote-heading").textContent = `Promotion of ${version} refused`;
    $("promote-refusal").textContent = error.message;
    $("promote-reason").value = "";
    $("promote-error").textContent = "";
    showReleaseMessage(`Promotion of ${version} refused: ${error.message}`, true);
    dialog.showModal();
    $("promote-reason").focus();
    return;
  }
  if (dialog.open) {
    $("promote-error").textContent = error.message;
    return;
  }
  showReleaseMessage(`Promotion of ${version} refused: ${error.message}`, true);
}

// ---- wiring ----

function readFilters() {
  view.filters = {
    state: $("filter-state").value,
    room: $("filter-room").value.trim(),
    model: $("filter-model").value.trim(),
    sort: $("sort").value,
    order: $("order").value,
  };
  view.cursors = [null];
}

function start() {
  const stateSelect = $("filter-state");
  for (const [state, label] of Object.entries(STATES)) stateSelect.append(el("option", { text: label, attrs: { value: state } }));

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    view.key = key;
    $("key-input").value = "";
    $("key-error").textContent = "";
    $("key-panel").hidden = true;
    $("fleet").hidden = false;
    $("session-actions").hidden = false;
    view.cursors = [null];
    $("title").focus();
    loadAll();
  });
  $("refresh").addEventListener("click", () => loadAll());
  $("change-key").addEventListener("click", () => askForKey("Enter the key to use."));
  $("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    readFilters();
    loadAll();
  });
  for (const id of ["filter-state", "sort", "order"]) {
    $(id).addEventListener("change", () => {
      readFilters();
      loadAll();
    });
  }
  $("clear-filters").addEventListener("click", () => {
    $("filter-state").value = "";
    $("filter-room").value = "";
    $("filter-model").value = "";
    readFilters();
    loadAll();
  });
  $("next-page").addEventListener("click", () => {
    const cursor = $("next-page").dataset.cursor;
    if (!cursor) return;
    view.cursors.push(cursor);
    loadAll();
  });
  $("prev-page").addEventListener("click", () => {
    if (view.cursors.length > 1) view.cursors.pop();
    loadAll();
  });
  $("promote-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const reason = $("promote-reason").value.trim();
    if (!reason) {
      $("promote-error").textContent = "Give a reason: it is recorded with the promotion.";
      return;
    }
    promote(view.promoting, { reason });
  });
  $("promote-cancel").addEventListener("click", () => $("promote-dialog").close());
  $("key-input").focus();
}

start();
