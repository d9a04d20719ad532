// What the fleet page's scripts share: small DOM helpers through which every piece of API data
// goes in as text (textContent), never as HTML.

export function el(tag, options = {}, children = []) {
  const node = document.createElement(tag);
  if (options.text !== undefined) node.textContent = options.text;
  if (options.className) node.className = options.className;
  for (const [name, value] of Object.entries(options.attrs ?? {})) node.setAttribute(name, value);
  for (const child of children) if (child) node.append(child);
  return node;
}

export function icon(name) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "icon");
  svg.setAttribute("aria-hidden", "true");
  const use = document.createElementNS("http://www.w3.org/2000/svg", "use");
  use.setAttribute("href", `#icon-${name}`);
  svg.append(use);
  return svg;
}

/** Writes a status line (`refused` marks it as a refusal); an empty text hides it. */
export function showMessage(id, text, refused) {
  const message = document.getElementById(id);
  message.textContent = text;
  message.classList.toggle("refused", refused);
}

/**
 * For a list the page asked /v1 for: says in `messageId` why it cannot be shown (the key lacks
 * `scope`, clearing `container`; or the server refused) and returns true, or returns false.
 */
export function listUnusable(answer, what, scope, messageId, container) {
  if (answer.status === 403) {
    container.replaceChildren();
    showMessage(messageId, `This key cannot see ${what} (it needs ${scope}).`, false);
    return true;
  }
  if (answer.status !== 200) {
    showMessage(messageId, `Could not load the ${what}: ${answer.body.error?.message ?? `HTTP ${answer.status}`}`, true);
    return true;
  }
  return false;
}

export function cell(label, children, className) {
  return el("td", { attrs: { "data-label": label }, className }, children);
}

export function timeText(iso) {
  if (!iso) return el("span", { text: "never" });
  const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
  const ago =
    seconds < 60 ? "just now" : seconds < 3600 ? `${Math.floor(seconds / 60)} min ago` : seconds < 86400 ? `${Math.floor(seconds / 3600)} h ago` : `${Math.floor(seconds / 86400)} days ago`;
  return el("time", { text: ago, attrs: { datetime: iso, title: new Date(iso).toLocaleString() } });
}
