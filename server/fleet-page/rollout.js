// The fleet page's staged rollout panel (issue 24): the mode's latest rollout (GET /v1/rollouts),
// its stage, its badges counted per stage, its halt with the badges and reasons, and the
// operator's buttons (advance, pause, resume, abort), which POST to /v1/rollouts/{id}/{action}.

import { cell, el, listUnusable, showMessage, timeText } from "./dom.js";

const STATUS_WORDS = { active: "Active", paused: "Paused", halted: "Halted", aborted: "Aborted", completed: "Completed" };
/** The actions a status allows, in the order the buttons show. */
const ACTIONS = { active: ["advance", "pause", "abort"], paused: ["resume", "abort"], halted: ["resume", "abort"], aborted: [], completed: [] };
const ACTION_WORDS = { advance: "Advance to the next stage", pause: "Pause", resume: "Resume", abort: "Abort" };

const $ = (id) => document.getElementById(id);

const showRolloutMessage = (text, refused) => showMessage("rollout-message", text, refused);

/**
 * Renders GET /v1/rollouts's answer. `page.api` is the page's /v1 call, `page.reload` reloads
 * the whole page's data after an action, `page.failed` handles a refused key or a lost server.
 */
export function renderRollout(answer, page) {
  const panel = $("rollout");
  if (listUnusable(answer, "rollouts", "releases:read", "rollout-message", panel)) return;
  const rollout = answer.body.data[0];
  if (!rollout) {
    panel.replaceChildren(el("p", { text: "No staged rollout yet. Start one for a release whose canary reported ok: badgebench release rollout create VERSION, or POST /v1/rollouts." }));
    return;
  }
  panel.replaceChildren(summary(rollout), stageTable(rollout), ...(rollout.status === "halted" && rollout.halt ? [haltBox(rollout.halt)] : []), actions(rollout, page));
}

function summary(rollout) {
  const stage = `stage ${rollout.stage.index + 1} of ${rollout.stages.length} (${rollout.stage.percent} % of the fleet)`;
  const from = rollout.previous_version ? `from ${rollout.previous_version}` : "first release";
  return el("p", { className: "rollout-summary", attrs: { "data-rollout-status": rollout.status } }, [
    el("strong", { className: `rollout-status rollout-${rollout.status}`, text: STATUS_WORDS[rollout.status] ?? rollout.status }),
    el("span", { text: ` ${rollout.version} (${from}), ${stage}, since ` }),
    timeText(rollout.stage.started_at),
    el("span", { className: "sub", text: `${rollout.counts.ok} of ${rollout.counts.badges} badges run ${rollout.version}; ${rollout.counts.failed} failed` }),
  ]);
}

function stageTable(rollout) {
  const rows = rollout.counts.stages.map((stage, i) =>
    el("tr", { attrs: { "data-stage": String(stage.percent) }, className: i === rollout.stage.index ? "current-stage" : "" }, [
      cell("Stage", [el("strong", { text: `${stage.percent} %` }), el("span", { className: "sub", text: i === rollout.stage.index ? "current" : stage.open ? "opened" : "not yet" })]),
      cell("Badges", [el("span", { text: String(stage.badges) })]),
      cell("Downloaded", [el("span", { text: String(stage.downloaded) })]),
      cell("Run it (ok)", [el("span", { text: String(stage.ok) })]),
      cell("Failed", [el("span", { text: String(stage.failed) })]),
    ]),
  );
  const head = el("thead", {}, [el("tr", {}, ["Stage", "Badges", "Downloaded", "Run it (ok)", "Failed"].map((name) => el("th", { text: name, attrs: { scope: "col" } })))]);
  return el("div", { className: "table-wrap" }, [el("table", { attrs: { id: "rollout-stages" }, className: "cards-on-phone" }, [head, el("tbody", {}, rows)])]);
}

function haltBox(halt) {
  const failures = halt.failures.map((failure) =>
    el("li", { attrs: { "data-failed-badge": failure.device_id } }, [el("span", { className: "name", text: failure.name }), el("span", { text: ` (${failure.device_id}): ${failure.reason}` })]),
  );
  return el("div", { className: "halt", attrs: { role: "alert" } }, [
    el("p", {}, [el("strong", { text: "Halted: " }), el("span", { text: halt.why }), el("span", { text: ". No badge is offered the release until you resume or abort." })]),
    el("ul", {}, failures),
  ]);
}

function actions(rollout, page) {
  const buttons = (ACTIONS[rollout.status] ?? []).map((action) => {
    const button = el("button", { text: ACTION_WORDS[action], attrs: { type: "button", "data-rollout-action": action } });
    button.addEventListener("click", () => act(rollout, action, page));
    return button;
  });
  return el("div", { className: "rollout-actions" }, buttons);
}

async function act(rollout, action, page) {
  // One key per attempt: a refusal is kept for its key, and the next attempt is a new request.
  const idempotencyKey = `fleet-page-rollout-${action}-${crypto.randomUUID()}`;
  let answer;
  try {
    answer = await page.api("POST", `/v1/rollouts/${encodeURIComponent(rollout.id)}/${action}`, {}, idempotencyKey);
  } catch (error) {
    return page.failed(error);
  }
  if (answer.status !== 200) {
    showRolloutMessage(`${ACTION_WORDS[action]} refused: ${answer.body.error?.message ?? `HTTP ${answer.status}`}`, true);
    return;
  }
  showRolloutMessage(`${ACTION_WORDS[action]}: the rollout of ${rollout.version} is now ${STATUS_WORDS[answer.body.status].toLowerCase()}.`, false);
  return page.reload();
}
