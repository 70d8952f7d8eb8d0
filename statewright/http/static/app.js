/* statewright dashboard: a plain-JavaScript client of the REST API under /v1.
 *
 * Every value from the server reaches the page through textContent or setAttribute (see h()),
 * never as HTML. The Mermaid diagram is Mermaid's own sanitised SVG (securityLevel "strict"),
 * parsed with DOMParser. The token lives in sessionStorage and goes out as a Bearer header;
 * the page shows approve/deny only when the API lists an approval event among the caller's
 * allowed events, and the API enforces the same rule on POST /v1/approvals.
 */
(() => {
  "use strict";

  const TOKEN_KEY = "statewright.token";
  const POLL_MS = 4000; // refresh period without the live stream
  const LIVE_POLL_MS = 15000; // with it (ages and stuck flags still move with time)
  const ACTIVE_LIMIT = 500;
  const FINISHED_LIMIT = 100;
  const HISTORY_SHOWN = 1000; // a workflow's page shows its latest transitions, this many
  const HISTORY_PAGE = 1000; // the API's largest page
  const HISTORY_PAGES = 5; // pages fetched at most per refresh (the log may grow meanwhile)
  const CHILDREN_SHOWN = 100; // a parent's page lists its first children (by id), this many

  // -- DOM helpers ---------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) {
        // Handlers only as functions: never an inline-handler attribute.
        if (typeof value === "function") el.addEventListener(key.slice(2), value);
      } else if (key === "class") el.className = value;
      else el.setAttribute(key, value === true ? "" : String(value));
    }
    return add(el, ...children);
  }

  /** Replace el's children (null, undefined and false children are left out). */
  function fill(el, ...children) {
    el.replaceChildren();
    return add(el, ...children);
  }

  function add(el, ...children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  const $ = (sel, root = document) => root.querySelector(sel);
  const enc = encodeURIComponent;

  // -- formatting ----------------------------------------------------------------------------

  function duration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s}s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${s % 60}s`;
    const hours = Math.floor(m / 60);
    if (hours < 48) return `${hours}h ${m % 60}m`;
    return `${Math.floor(hours / 24)}d ${hours % 24}h`;
  }

  const pad = (n) => String(n).padStart(2, "0");

  function timestamp(epoch) {
    if (epoch === null || epoch === undefined) return "—";
    const d = new Date(epoch * 1000);
    return (
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
    );
  }

  function timeEl(epoch) {
    if (epoch === null || epoch === undefined) return "—";
    return h("time", { datetime: new Date(epoch * 1000).toISOString() }, timestamp(epoch));
  }

  const now = () => Date.now() / 1000;

  function compactJson(value) {
    const text = JSON.stringify(value);
    return text === undefined ? "" : text;
  }

  // -- API client ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message, errors = null) {
      super(message);
      this.status = status;
      this.code = code;
      this.errors = errors; // a schema's errors (422 invalid_payload, input_not_accepted)
    }
  }

  const getToken = () => sessionStorage.getItem(TOKEN_KEY) || "";

  // The latest HISTORY_SHOWN entries of a workflow's log, a page at a time: versions run from 1
  // to the workflow's version, so they start after version - HISTORY_SHOWN.
  async function latestHistory(id, version) {
    const skipped = Math.max(0, version - HISTORY_SHOWN);
    const items = [];
    let after = skipped;
    for (let i = 0; i < HISTORY_PAGES; i += 1) {
      const page = await api(
        `/v1/workflows/${enc(id)}/history?after=${enc(after)}&limit=${HISTORY_PAGE}`,
      );
      items.push(...page.items);
      if (page.next_cursor === null) break;
      after = page.next_cursor;
    }
    return { items, skipped };
  }

  async function api(path, { method = "GET", body, text = false } = {}) {
    const headers = { Accept: text ? "text/plain" : "application/json" };
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(path, {
        method,
        headers,
        cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (exc) {
      throw new ApiError(0, "network", `the service does not answer (${exc.message})`);
    }
    if (!resp.ok) {
      let error = {};
      try {
        error = (await resp.json()).error || {};
      } catch (_) {
        /* not JSON */
      }
      throw new ApiError(
        resp.status,
        error.code || `http_${resp.status}`,
        error.message || resp.statusText,
        Array.isArray(error.errors) ? error.errors : null,
      );
    }
    return text ? resp.text() : resp.json();
  }

  // -- banner and connection status ----------------------------------------------------------

  /** source "refresh": cleared by the next successful refresh; otherwise kept until the next
   * page or action. */
  function showBanner(message, kind = "error", source = "action") {
    const banner = $("#banner");
    banner.className = `banner ${kind}`;
    banner.dataset.source = source;
    fill(banner, message);
    banner.hidden = false;
  }

  function clearBanner() {
    $("#banner").hidden = true;
  }

  function reportError(exc, source = "action") {
    if (exc instanceof ApiError && exc.status === 401) {
      showBanner(
        getToken()
          ? `The token was refused: ${exc.message}. Enter another one above.`
          : "This service needs an API token: enter it above.",
        "warn",
        source,
      );
      $("#token").focus();
    } else {
      const text = exc instanceof ApiError ? `${exc.message} (${exc.code})` : String(exc);
      showBanner(text, "error", source);
    }
  }

  // -- workflow types ------------------------------------------------------------------------

  const types = { byKey: new Map(), byName: new Map(), loaded: false };

  async function loadTypes() {
    const list = await api("/v1/types");
    types.byKey.clear();
    types.byName.clear();
    for (const t of list) {
      types.byKey.set(`${t.name}@${t.version}`, t);
      const known = types.byName.get(t.name);
      if (!known || known.version < t.version) types.byName.set(t.name, t);
    }
    types.loaded = true;
    const mayDecide = list.some((t) => t.events.some((e) => e.approval && e.may_fire));
    const mayFire = list.some((t) => t.events.some((e) => e.may_fire));
    const who = getToken() ? "token in use" : "open mode, no token";
    const rights = mayDecide ? "may approve" : mayFire ? "may not approve" : "read-only";
    $("#whoami").textContent = `${who} · ${rights}`;
  }

  function typeOf(wf) {
    return types.byKey.get(`${wf.type}@${wf.machine_version}`) || types.byName.get(wf.type);
  }

  /** The approval events the caller may fire on this workflow now. */
  function decisionEvents(wf) {
    const t = typeOf(wf);
    if (!t || !wf.allowed_events) return [];
    const approval = new Set(t.events.filter((e) => e.approval).map((e) => e.name));
    return wf.allowed_events.filter((e) => approval.has(e));
  }

  function stateInfo(wf) {
    const t = typeOf(wf);
    return t ? t.states.find((s) => s.name === wf.state) : undefined;
  }

  // -- badges --------------------------------------------------------------------------------

  function stateBadge(wf, attrs = {}) {
    const cls = ["state", wf.terminal ? "terminal" : "active", wf.stuck ? "stuck" : ""];
    return h("span", { ...attrs, class: cls.join(" ").trim() }, wf.state);
  }

  // A parked workflow waits for an operator (resolve the step, or resume it): nothing runs,
  // and it counts as stuck from the moment it parks.
  function parkedBadge(wf, attrs = {}) {
    return h(
      "span",
      {
        ...attrs,
        class: "badge badge-parked",
        "data-parked": wf.parked,
        title:
          wf.parked === "step_outcome_unknown"
            ? "Waits for an operator: a step's outcome is unknown; resolve the step."
            : "Waits for an operator: fix the cause, then resume the workflow.",
      },
      `parked: ${wf.parked}`,
    );
  }

  // What the workflow's agents' model calls used (GET /v1/workflows/{id} has `usage` only
  // for a workflow whose agents called a model): tokens, calls and cost, then by state.
  function usageFacts(usage) {
    const t = usage.total;
    const num = (n) => n.toLocaleString();
    const byState = Object.entries(usage.by_state)
      .map(([state, u]) => `${state}: ${num(u.tokens)} tokens, ${u.model_calls} calls`)
      .join("; ");
    const byModel = Object.entries(usage.by_model)
      .map(([model, u]) => `${model}: ${num(u.tokens)}`)
      .join("; ");
    return h(
      "span",
      { id: "wf-usage", "data-tokens": t.tokens, "data-calls": t.model_calls, "data-cost": t.cost },
      `${num(t.tokens)} tokens (${num(t.input_tokens)} in, ${num(t.output_tokens)} out), ` +
        `${t.model_calls} model calls, $${t.cost.toFixed(4)}`,
      h("br"),
      h("span", { class: "muted", id: "wf-usage-states" }, `By state: ${byState}`),
      h("br"),
      h("span", { class: "muted", id: "wf-usage-models" }, `By model: ${byModel}`),
    );
  }

  function notes(wf) {
    const out = [];
    if (wf.stuck) out.push(h("span", { class: "badge badge-stuck" }, "stuck"));
    if (decisionEvents(wf).length) {
      out.push(h("span", { class: "badge badge-paused" }, "awaiting your decision"));
    }
    if (wf.parked) out.push(parkedBadge(wf));
    if (wf.cancel_requested) out.push(h("span", { class: "badge" }, "cancel requested"));
    if (wf.leased_by && !wf.terminal) {
      out.push(h("span", { class: "badge badge-running", title: wf.leased_by }, "running"));
    }
    if (wf.last_error) {
      const short = wf.last_error.length > 80 ? `${wf.last_error.slice(0, 80)}…` : wf.last_error;
      out.push(h("span", { class: "badge badge-error", title: wf.last_error }, short));
    }
    return out;
  }

  // -- actions: fire an event, cancel, start ---------------------------------------------------
  // Each is shown only to a caller the API lets take it (an event's `may_fire` and the
  // workflow's `allowed_events`, a type's `cancel_event` and `may_start`); the API checks the
  // same roles again and its refusal is shown. Payload and input forms come from the JSON
  // Schema: simple properties (string, number, integer, boolean, enum) get a field each;
  // anything else is a JSON textarea, parsed before anything is sent.

  const SIMPLE = new Set(["string", "number", "integer", "boolean"]);

  function simpleSchema(schema) {
    if (!schema || schema.type !== "object" || typeof schema.properties !== "object") return false;
    return Object.values(schema.properties).every(
      (p) => p && (Array.isArray(p.enum) || SIMPLE.has(p.type)),
    );
  }

  /** A form for `schema` (null: any object); read() gives {value} or {error}. */
  function schemaForm(schema, prefix) {
    if (!simpleSchema(schema)) {
      const area = h("textarea", {
        id: `${prefix}-json`,
        rows: 3,
        maxlength: 262144,
        placeholder: "{} (a JSON object)",
      });
      const read = () => {
        const text = area.value.trim() || "{}";
        let value;
        try {
          value = JSON.parse(text);
        } catch (exc) {
          return { error: `Not JSON: ${exc.message}` };
        }
        if (value === null || typeof value !== "object" || Array.isArray(value)) {
          return { error: "Give a JSON object, e.g. {}" };
        }
        return { value };
      };
      return { el: h("div", { class: "schema-form" }, area), read };
    }
    const required = new Set(schema.required || []);
    const fields = [];
    const rows = Object.entries(schema.properties).map(([name, prop]) => {
      const id = `${prefix}-f-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
      let input;
      if (Array.isArray(prop.enum)) {
        input = h(
          "select",
          { id },
          required.has(name) ? null : h("option", { value: "" }, "—"),
          prop.enum.map((v, i) => h("option", { value: String(i) }, String(v))),
        );
      } else if (prop.type === "boolean") {
        input = h("input", { id, type: "checkbox" });
      } else {
        input = h("input", {
          id,
          type: prop.type === "string" ? "text" : "number",
          step: prop.type === "integer" ? "1" : "any",
        });
      }
      fields.push({ name, prop, input });
      return h(
        "div",
        { class: "field" },
        h("label", { for: id }, name, required.has(name) ? " *" : ""),
        input,
        prop.description ? h("span", { class: "muted" }, ` ${prop.description}`) : null,
      );
    });
    const read = () => {
      const value = {};
      for (const { name, prop, input } of fields) {
        if (Array.isArray(prop.enum)) {
          if (input.value !== "") value[name] = prop.enum[Number(input.value)];
        } else if (prop.type === "boolean") {
          value[name] = input.checked;
        } else if (input.value.trim() !== "") {
          if (prop.type === "string") value[name] = input.value;
          else {
            const n = Number(input.value);
            if (!Number.isFinite(n) || (prop.type === "integer" && !Number.isInteger(n))) {
              return { error: `${name}: give ${prop.type === "integer" ? "an integer" : "a number"}` };
            }
            value[name] = n;
          }
        }
        if (required.has(name) && !(name in value)) return { error: `${name} is required` };
      }
      return { value };
    };
    return { el: h("div", { class: "schema-form" }, rows), read };
  }

  /** A refusal with the schema's errors, as a list next to the form. */
  function refusalList(exc) {
    const text = exc instanceof ApiError ? `${exc.message} (${exc.code})` : String(exc);
    const errors = exc instanceof ApiError && exc.errors ? exc.errors : [];
    return [
      h("p", {}, text),
      errors.length
        ? h("ul", {}, errors.map((e) => h("li", {}, typeof e === "string" ? e : compactJson(e))))
        : null,
    ];
  }

  /** The events this caller may fire on the workflow now (approvals and the cancel event
   * have their own buttons), each a button opening its payload form; and Cancel. */
  function renderActions(detail, wf) {
    const slot = detail.actions;
    const t = typeOf(wf);
    if (!t || wf.terminal) {
      fill(slot);
      return;
    }
    const byName = new Map(t.events.map((e) => [e.name, e]));
    const events = (wf.allowed_events || []).filter((name) => {
      const e = byName.get(name);
      return e && e.may_fire && !e.approval && name !== t.cancel_event;
    });
    const cancelEvent = t.cancel_event ? byName.get(t.cancel_event) : null;
    const mayCancel = Boolean(cancelEvent && cancelEvent.may_fire && !wf.cancel_requested);
    if (!events.length && !mayCancel) {
      fill(slot);
      return;
    }
    const status = h("div", { class: "action-status", id: "event-errors", role: "status" });
    const formSlot = h("div", { id: "event-form-slot" });
    const busy = (on) => {
      for (const b of slot.querySelectorAll("button")) b.disabled = on;
    };
    const openForm = (e) => {
      const form = schemaForm(e.payload_schema, "event");
      fill(status);
      fill(
        formSlot,
        h(
          "div",
          { class: "event-form", id: "event-form", "data-event": e.name },
          h("h3", {}, `Fire ${e.name}`),
          e.description ? h("p", { class: "muted" }, e.description) : null,
          form.el,
          h(
            "button",
            {
              type: "button",
              id: "event-send",
              onclick: async () => {
                const read = form.read();
                if (read.error) {
                  fill(status, read.error);
                  return;
                }
                busy(true);
                fill(status, "Sending…");
                const body = { event: e.name, payload: read.value, expected_version: wf.version };
                try {
                  const after = await api(`/v1/workflows/${enc(wf.id)}/events`, {
                    method: "POST",
                    body,
                  });
                  fill(formSlot);
                  fill(status);
                  showBanner(`Fired ${e.name}: ${after.id} is now in ${after.state}.`, "ok");
                  detail.version = null; // re-render from the server's answer
                  await refresh();
                } catch (exc) {
                  // Nothing changed: the form stays as typed, with the refusal under it
                  // (a version conflict: the page shows the workflow as it is now).
                  fill(status, refusalList(exc));
                  if (exc instanceof ApiError && exc.code === "version_conflict") {
                    showBanner(
                      "The workflow changed while you were looking at it: check it again.",
                      "warn",
                    );
                    detail.version = null;
                    await refresh();
                  } else {
                    reportError(exc);
                  }
                } finally {
                  busy(false);
                }
              },
            },
            `Send ${e.name}`,
          ),
        ),
      );
    };
    const buttons = events.map((name) =>
      h(
        "button",
        {
          type: "button",
          class: "secondary",
          id: `fire-${name}`,
          "data-event": name,
          onclick: () => openForm(byName.get(name)),
        },
        name,
      ),
    );
    let cancel = null;
    if (mayCancel) {
      const reason = h("input", {
        id: "cancel-reason",
        type: "text",
        maxlength: 1000,
        placeholder: "Why cancel (kept in the history)",
      });
      cancel = h(
        "div",
        { class: "actions cancel-row" },
        reason,
        h(
          "button",
          {
            type: "button",
            id: "cancel",
            class: "deny",
            onclick: async () => {
              busy(true);
              const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
              try {
                const after = await api(`/v1/workflows/${enc(wf.id)}/cancel`, {
                  method: "POST",
                  body,
                });
                showBanner(
                  after.cancel_requested && !after.terminal
                    ? `Cancel requested: the worker running ${after.id} stops it.`
                    : `Cancelled: ${after.id} is now in ${after.state}.`,
                  "ok",
                );
              } catch (exc) {
                reportError(exc);
              } finally {
                busy(false);
                detail.version = null;
                await refresh();
              }
            },
          },
          "Cancel workflow",
        ),
      );
    }
    fill(
      slot,
      h(
        "section",
        { class: "panel actions-panel", id: "workflow-actions" },
        h("h2", {}, "Actions"),
        events.length
          ? h("div", { class: "actions", id: "event-buttons" }, h("span", {}, "Fire: "), buttons)
          : null,
        formSlot,
        status,
        cancel,
      ),
    );
  }

  /** Start a workflow of a type the caller may start: its input form from the type's
   * input_schema; a refusal (422 with the schema's errors) is listed next to the form. */
  function renderStart(listPage) {
    const startable = [...types.byName.values()].filter((t) => t.may_start);
    if (!startable.length) {
      fill(listPage.start);
      return;
    }
    const select = h(
      "select",
      { id: "start-type", "aria-label": "Type to start" },
      h("option", { value: "" }, "— type —"),
      startable.map((t) => h("option", { value: t.name }, t.name)),
    );
    const wid = h("input", { id: "start-id", type: "text", placeholder: "id (optional)" });
    const formSlot = h("div", { id: "start-form" });
    const errors = h("div", { class: "action-status", id: "start-errors", role: "status" });
    let form = null;
    select.addEventListener("change", () => {
      const t = types.byName.get(select.value);
      form = t ? schemaForm(t.input_schema, "start") : null;
      fill(formSlot, form ? form.el : null);
      fill(errors);
    });
    const button = h(
      "button",
      {
        type: "button",
        id: "start-send",
        onclick: async () => {
          if (!form) {
            fill(errors, "Choose a type first.");
            return;
          }
          const read = form.read();
          if (read.error) {
            fill(errors, read.error);
            return;
          }
          const body = { type: select.value, input: read.value };
          if (wid.value.trim()) body.id = wid.value.trim();
          button.disabled = true;
          fill(errors, "Starting…");
          try {
            const wf = await api("/v1/workflows", { method: "POST", body });
            window.addEventListener(
              "hashchange",
              () => showBanner(`Started ${wf.id}, in ${wf.state}.`, "ok"),
              { once: true },
            );
            location.hash = `#/workflows/${enc(wf.id)}`;
          } catch (exc) {
            fill(errors, refusalList(exc));
          } finally {
            button.disabled = false;
          }
        },
      },
      "Start",
    );
    fill(
      listPage.start,
      h(
        "details",
        { class: "panel start-panel", id: "start-panel" },
        h("summary", {}, "Start a workflow"),
        h("div", { class: "actions" }, select, wid),
        formSlot,
        h("div", { class: "actions" }, button),
        errors,
      ),
    );
  }

  // -- the list page -------------------------------------------------------------------------

  class ListPage {
    constructor(params) {
      this.type = params.get("type") || "";
      this.state = params.get("state") || "";
      this.finished = params.get("finished") === "1";
      // Search attributes, "name=value" (several: comma-separated), matched by the server.
      this.where = params.get("where") || "";
      this.root = h("div", { class: "page list-page" });
      this.stats = h("div", { class: "stats", id: "stats" });
      this.cards = h("div", { class: "type-grid", id: "state-counts" });
      this.updated = h("span", { class: "muted updated" });
      this.filterNote = h("div", { class: "filter-note" });
      this.tbody = h("tbody");
      this.capNote = h("p", { class: "muted cap-note", hidden: true });
      const finishedBox = h("input", {
        type: "checkbox",
        id: "show-finished",
        checked: this.finished,
        onchange: (ev) => this.go({ finished: ev.target.checked ? "1" : "" }),
      });
      this.start = h("div", { id: "start-slot" });
      this.bulk = h("div", { id: "bulk-slot" }); // bulk.js's panel, for operators
      add(
        this.root,
        this.start,
        this.bulk,
        h(
          "section",
          { class: "panel" },
          h("div", { class: "panel-head" }, h("h1", {}, "Workflows by state"), this.updated),
          this.stats,
          this.cards,
        ),
        h(
          "section",
          { class: "panel" },
          h(
            "div",
            { class: "panel-head" },
            h("h2", {}, "Workflows, longest in their state first"),
            h(
              "div",
              { class: "filters" },
              this.filterNote,
              h("input", {
                type: "search",
                id: "search-attributes",
                placeholder: "order_number=A-1",
                title: "Search attributes: name=value (several: comma-separated)",
                value: this.where,
                onchange: (ev) => this.go({ where: ev.target.value.trim() }),
              }),
              h("label", { class: "check" }, finishedBox, " include finished"),
              h(
                "button",
                { type: "button", class: "secondary", onclick: () => refresh() },
                "Refresh",
              ),
            ),
          ),
          h(
            "table",
            { class: "table", id: "workflows" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                [
                  "Workflow",
                  "Type",
                  "State",
                  "In state for",
                  "Version",
                  "Tenant",
                  "Updated",
                  "Notes",
                ].map((c) => h("th", {}, c)),
              ),
            ),
            this.tbody,
          ),
          this.capNote,
        ),
      );
    }

    go(changes) {
      const params = new URLSearchParams();
      const next = {
        type: this.type,
        state: this.state,
        finished: this.finished ? "1" : "",
        where: this.where,
        ...changes,
      };
      for (const [k, v] of Object.entries(next)) if (v) params.set(k, v);
      const query = params.toString();
      location.hash = query ? `#/?${query}` : "#/";
    }

    async refresh() {
      if (!this.start.firstChild) renderStart(this);
      const where = new URLSearchParams({ limit: String(ACTIVE_LIMIT) });
      for (const pair of this.where.split(",")) {
        if (pair.trim()) where.append("where", pair.trim());
      }
      const [active, finished, found] = await Promise.all([
        api(`/v1/workflows?terminal=false&limit=${ACTIVE_LIMIT}`),
        api(`/v1/workflows?terminal=true&limit=${FINISHED_LIMIT}`),
        this.where ? api(`/v1/workflows?${where}`) : null,
      ]);
      this.render(active.items, finished.items, found && found.items);
    }

    render(active, finished, found) {
      const capped = {
        active: active.length >= ACTIVE_LIMIT,
        finished: finished.length >= FINISHED_LIMIT,
      };
      const all = active.concat(finished);
      // Counts per type and state, in the order the type declares its states.
      const counts = new Map();
      for (const wf of all) {
        if (!counts.has(wf.type)) counts.set(wf.type, new Map());
        const byState = counts.get(wf.type);
        const c = byState.get(wf.state) || { n: 0, stuck: 0 };
        c.n += 1;
        if (wf.stuck) c.stuck += 1;
        byState.set(wf.state, c);
      }
      const typeNames = [...new Set([...types.byName.keys(), ...counts.keys()])].sort();
      const stuck = active.filter((wf) => wf.stuck).length;
      const waiting = active.filter((wf) => decisionEvents(wf).length).length;
      fill(
        this.stats,
        stat("active", active.length + (capped.active ? "+" : ""), "active"),
        stat("stuck", stuck, "stuck", stuck > 0),
        stat("waiting", waiting, "awaiting your decision"),
        stat("finished", finished.length + (capped.finished ? "+" : ""), "finished"),
      );
      fill(
        this.cards,
        ...typeNames.map((name) => {
          const t = types.byName.get(name);
          const byState = counts.get(name) || new Map();
          const declared = t
            ? t.states
            : [...byState.keys()].map((s) => ({ name: s, terminal: false }));
          return h(
            "div",
            { class: "type-card", "data-type": name },
            h(
              "h3",
              {},
              name,
              t && t.description ? h("span", { class: "muted" }, ` — ${t.description}`) : null,
            ),
            h(
              "div",
              { class: "chips" },
              declared.map((s) => {
                const c = byState.get(s.name) || { n: 0, stuck: 0 };
                const cap = s.terminal ? capped.finished : capped.active;
                const cls = [
                  "chip",
                  s.terminal ? "terminal" : "",
                  c.n ? "" : "zero",
                  c.stuck ? "stuck" : "",
                ];
                if (this.type === name && this.state === s.name) cls.push("selected");
                const query = new URLSearchParams({ type: name, state: s.name });
                if (s.terminal) query.set("finished", "1");
                return h(
                  "a",
                  {
                    class: cls.join(" ").replace(/\s+/g, " ").trim(),
                    href: `#/?${query}`,
                    "data-state": s.name,
                    "data-count": c.n,
                    title: s.description || s.name,
                  },
                  h("span", { class: "chip-state" }, s.name),
                  h("span", { class: "chip-count" }, `${c.n}${cap && c.n ? "+" : ""}`),
                  c.stuck ? h("span", { class: "chip-stuck" }, `${c.stuck} stuck`) : null,
                );
              }),
            ),
          );
        }),
      );
      if (!typeNames.length) fill(this.cards, h("p", { class: "muted" }, "No workflow types."));

      let rows = this.finished || this.stateIsTerminal() ? all : active;
      if (found) rows = found; // those the search attributes match, finished or not
      if (this.type) rows = rows.filter((wf) => wf.type === this.type);
      if (this.state) rows = rows.filter((wf) => wf.state === this.state);
      fill(
        this.filterNote,
        this.type || this.state
          ? h(
              "span",
              { class: "chip selected" },
              `${this.type || "any type"} / ${this.state || "any state"} `,
              h(
                "a",
                {
                  href: this.finished ? "#/?finished=1" : "#/",
                  class: "clear",
                  title: "Clear the filter",
                },
                "×",
              ),
            )
          : "",
      );
      const t = now();
      fill(
        this.tbody,
        ...rows.map((wf) => {
          const cls = [
            "wf-row",
            wf.stuck ? "stuck" : "",
            decisionEvents(wf).length ? "paused" : "",
            wf.terminal ? "terminal" : "",
          ];
          return h(
            "tr",
            {
              class: cls.join(" ").replace(/\s+/g, " ").trim(),
              "data-id": wf.id,
              "data-state": wf.state,
            },
            h(
              "td",
              {},
              h("a", { class: "wf-link", href: `#/workflows/${enc(wf.id)}` }, wf.id),
              wf.summary_text
                ? h("div", { class: "summary-text muted", title: wf.summary_text }, wf.summary_text)
                : null,
            ),
            h("td", {}, wf.type, h("span", { class: "muted" }, ` v${wf.machine_version}`)),
            h("td", {}, stateBadge(wf)),
            h(
              "td",
              { class: "num", title: `since ${timestamp(wf.state_entered_at)}` },
              duration(t - wf.state_entered_at),
            ),
            h("td", { class: "num" }, wf.version),
            h("td", {}, wf.tenant),
            h("td", {}, timeEl(wf.updated_at)),
            h("td", { class: "notes" }, notes(wf)),
          );
        }),
      );
      if (!rows.length) {
        fill(
          this.tbody,
          h("tr", {}, h("td", { colspan: 8, class: "muted empty" }, "No workflows here.")),
        );
      }
      this.capNote.hidden = !(capped.active || capped.finished);
      this.capNote.textContent =
        `Showing the ${ACTIVE_LIMIT} active and ${FINISHED_LIMIT} finished workflows longest in ` +
        "their state; counts marked + are at least that.";
      this.updated.textContent = `updated ${timestamp(t)}`;
      if (window.statewrightBulk) {
        window.statewrightBulk.update(this.bulk, {
          h,
          fill,
          api,
          enc,
          types,
          refusalList,
          reportError,
          showBanner,
          refresh,
          filter: { type: this.type, state: this.state, where: this.where },
          rows: all,
        });
      }
    }

    stateIsTerminal() {
      if (!this.state) return false;
      const candidates = this.type ? [types.byName.get(this.type)] : [...types.byName.values()];
      return candidates.some((t) => t && t.states.some((s) => s.name === this.state && s.terminal));
    }

    dispose() {}
  }

  function stat(id, value, label, alert = false) {
    return h(
      "div",
      { class: alert ? "stat alert" : "stat", id: `stat-${id}` },
      h("div", { class: "stat-value" }, value),
      h("div", { class: "stat-label" }, label),
    );
  }

  // -- the workflow page ---------------------------------------------------------------------

  let diagramSeq = 0;
  let mermaidLoading = null;

  /** Mermaid (3.5 MB) is loaded on the first diagram only; resolves to null without it. */
  function loadMermaid() {
    if (mermaidLoading === null) {
      mermaidLoading = new Promise((resolve) => {
        const script = h("script", { src: "vendor/mermaid/mermaid.min.js" });
        script.addEventListener("load", () => resolve(window.mermaid || null));
        script.addEventListener("error", () => resolve(null));
        document.head.append(script);
      }).then((m) => {
        if (!m || typeof m.render !== "function") return null;
        m.initialize({
          startOnLoad: false,
          securityLevel: "strict",
          theme: "neutral",
          fontFamily: "system-ui, -apple-system, 'Segoe UI', sans-serif",
          state: { useMaxWidth: true },
        });
        return m;
      });
    }
    return mermaidLoading;
  }

  /** Mermaid 11 draws a state that has a description with the description alone; a first
   * description equal to the state's id makes the id the box's title, above the description.
   * (States with an alias already get their name from `state "name" as alias`.) */
  function withStateNames(text) {
    const lines = text.split("\n");
    const aliased = new Set();
    for (const line of lines) {
      const alias = /^\s*state\s+"[^"]*"\s+as\s+(\S+)\s*$/.exec(line);
      if (alias) aliased.add(alias[1]);
    }
    const titled = new Set();
    const out = [];
    for (const line of lines) {
      const desc = /^(\s*)([A-Za-z][A-Za-z0-9_]*) : /.exec(line);
      if (desc && !aliased.has(desc[2]) && !titled.has(desc[2])) {
        out.push(`${desc[1]}${desc[2]} : ${desc[2]}`);
        titled.add(desc[2]);
      }
      out.push(line);
    }
    return out.join("\n");
  }

  async function renderDiagram(text, current) {
    const m = await loadMermaid();
    if (m) {
      try {
        const { svg } = await m.render(`sw-diagram-${++diagramSeq}`, withStateNames(text));
        // Parsed, not assigned with innerHTML: scripts never run from a DOMParser document.
        const doc = new DOMParser().parseFromString(svg, "text/html");
        const node = doc.querySelector("svg");
        if (node) {
          const el = document.importNode(node, true);
          markCurrent(el, current);
          return h("div", { class: "diagram-render", "data-current": current }, el);
        }
      } catch (exc) {
        console.warn("statewright: Mermaid could not render the diagram", exc);
      }
    }
    // Without the renderer: the diagram's text, the current state named.
    return h(
      "div",
      { class: "diagram-render fallback", "data-current": current },
      h("p", {}, "Current state: ", h("mark", { class: "current-state" }, current)),
      h("pre", { class: "diagram-source" }, text),
    );
  }

  /** Tag the current state's node: Mermaid fills it (`class <id> current` in the text) and
   * gives it the class "current"; the tag adds a glow (app.css) and a stable hook. */
  function markCurrent(svg, current) {
    for (const node of svg.querySelectorAll("g.node.current")) {
      node.classList.add("sw-current");
      node.setAttribute("data-state", current);
    }
  }

  class DetailPage {
    constructor(id) {
      this.id = id;
      this.root = h("div", { class: "page detail-page" });
      this.diagramKey = "";
      this.version = null;
      this.busy = false;
      this.head = h("div", { class: "wf-head" });
      this.facts = h("dl", { class: "facts", id: "facts" });
      this.decision = h("div", { id: "decision-slot" });
      this.operator = h("div", { id: "operator-slot" });
      this.actions = h("div", { id: "actions-slot" });
      this.diagram = h(
        "div",
        { class: "diagram", id: "diagram" },
        h("p", { class: "muted" }, "Rendering…"),
      );
      this.summary = h("div", { id: "summary" });
      this.children = h("section", { class: "panel", id: "children-panel", hidden: true });
      this.history = h("tbody");
      this.historyNote = h("div", { id: "history-note" });
      add(
        this.root,
        h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All workflows")),
        this.head,
        this.decision,
        this.actions,
        this.operator,
        h(
          "div",
          { class: "columns" },
          h(
            "section",
            { class: "panel diagram-panel" },
            h(
              "div",
              { class: "panel-head" },
              h("h2", {}, "Diagram"),
              h("span", { class: "legend" }, h("span", { class: "swatch" }), "current state"),
            ),
            this.diagram,
          ),
          h(
            "div",
            { class: "side" },
            h("section", { class: "panel" }, h("h2", {}, "Facts"), this.facts),
            h("section", { class: "panel" }, h("h2", {}, "Summary"), this.summary),
          ),
        ),
        this.children,
        h(
          "section",
          { class: "panel" },
          h("h2", {}, "History"),
          this.historyNote,
          h(
            "table",
            { class: "table history", id: "history" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                ["#", "Time", "Event", "From → to", "Actor", "Details"].map((c) => h("th", {}, c)),
              ),
            ),
            this.history,
          ),
        ),
      );
    }

    async refresh() {
      const wf = await api(`/v1/workflows/${enc(this.id)}`);
      const changed = wf.version !== this.version;
      this.renderHead(wf);
      // Children move without their parent (until it hears of their ends): every refresh.
      await this.renderChildren(wf);
      if (changed) {
        const { items: history, skipped } = await latestHistory(this.id, wf.version);
        this.renderDecision(wf);
        this.renderOperator(wf);
        renderActions(this, wf);
        this.renderSummary(wf);
        this.renderHistory(wf, history);
        fill(
          this.historyNote,
          skipped
            ? h(
                "p",
                { class: "muted" },
                `The latest ${HISTORY_SHOWN.toLocaleString()} transitions; ` +
                  `${skipped.toLocaleString()} earlier ones are not shown.`,
              )
            : null,
        );
        this.version = wf.version;
        if (wf.terminal && this.unfollow) {
          this.unfollow(); // nothing more will happen to it
        } else if (!this.unfollow && !this.disposed && !wf.terminal) {
          const seq = history.reduce((m, rec) => Math.max(m, rec.seq), 0);
          this.unfollow = follow(wf.id, seq, () => {
            clearTimeout(this.debounce);
            this.debounce = setTimeout(() => refresh(), 150);
          });
        }
      }
      await this.renderDiagram(wf);
    }

    renderHead(wf) {
      document.title = `${wf.id} · statewright`;
      const info = stateInfo(wf);
      fill(
        this.head,
        h("h1", { id: "wf-id" }, wf.id),
        stateBadge(wf, { id: "wf-state", "data-state": wf.state }),
        wf.stuck ? h("span", { class: "badge badge-stuck", id: "wf-stuck" }, "stuck") : null,
        wf.parked ? parkedBadge(wf, { id: "wf-parked" }) : null,
        wf.terminal ? h("span", { class: "badge" }, "finished") : null,
        info && info.description
          ? h("span", { class: "muted state-desc" }, info.description)
          : null,
      );
      const t = now();
      const rows = [
        ["Type", `${wf.type} v${wf.machine_version}`],
        ["Tenant", wf.tenant],
        ["Version", wf.version],
        [
          "In state for",
          `${duration(t - wf.state_entered_at)}${info && info.stuck_after ? ` (stuck after ${duration(info.stuck_after)})` : ""}`,
        ],
        ["Created", timeEl(wf.created_at)],
        ["Updated", timeEl(wf.updated_at)],
        ["Attempts", `${wf.attempts} (${wf.total_attempts} over its life)`],
        ["Next due", wf.next_due_at ? timeEl(wf.next_due_at) : "—"],
        ["Leased by", wf.leased_by || "—"],
        [
          "You may fire",
          wf.allowed_events && wf.allowed_events.length ? wf.allowed_events.join(", ") : "nothing",
        ],
      ];
      if (wf.parent) {
        rows.push([
          "Parent",
          h(
            "span",
            {},
            h("a", { id: "wf-parent", href: `#/workflows/${enc(wf.parent)}` }, wf.parent),
            h("span", { class: "muted" }, ` (child key ${wf.parent_key})`),
          ),
        ]);
      }
      if (wf.children && wf.children.total) rows.push(["Children", wf.children.text]);
      if (wf.usage) rows.push(["Model usage", usageFacts(wf.usage)]);
      if (wf.last_error) rows.push(["Last error", wf.last_error]);
      if (wf.cancel_requested) rows.push(["Cancel", "requested"]);
      fill(this.facts, ...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    }

    renderDecision(wf) {
      const events = decisionEvents(wf);
      const t = typeOf(wf);
      if (!events.length) {
        const approval = t ? t.events.filter((e) => e.approval) : [];
        const note =
          !wf.terminal && approval.length && !approval.some((e) => e.may_fire)
            ? h(
                "p",
                { class: "muted", id: "no-decision-rights" },
                `Your token may not approve or deny ${wf.type} workflows.`,
              )
            : null;
        fill(this.decision, note);
        return;
      }
      const typed = $("#decision-comment", this.decision); // kept across refreshes
      const comment = h("textarea", {
        id: "decision-comment",
        maxlength: 10000,
        rows: 2,
        placeholder: "Why (kept in the history)",
      });
      if (typed) comment.value = typed.value;
      const status = h("span", { class: "decision-status", id: "decision-status", role: "status" });
      const decide = (decision) => this.decide(wf, decision, comment, status);
      fill(
        this.decision,
        h(
          "section",
          { class: "panel decision", id: "decision" },
          h("h2", {}, "Decision needed"),
          h(
            "p",
            {},
            "Paused in ",
            h("strong", {}, wf.state),
            " until an approver decides. Your token may fire: ",
            events.join(", "),
            ".",
          ),
          h("label", { for: "decision-comment" }, "Comment (optional)"),
          comment,
          h(
            "div",
            { class: "actions" },
            h(
              "button",
              { type: "button", id: "approve", class: "approve", onclick: () => decide("approve") },
              "Approve",
            ),
            h(
              "button",
              { type: "button", id: "deny", class: "deny", onclick: () => decide("deny") },
              "Deny",
            ),
            status,
          ),
        ),
      );
    }

    async decide(wf, decision, comment, status) {
      if (this.busy) return;
      this.busy = true;
      for (const b of this.decision.querySelectorAll("button")) b.disabled = true;
      status.textContent = decision === "approve" ? "Approving…" : "Denying…";
      const body = { workflow_id: wf.id, decision, expected_version: wf.version };
      if (comment.value.trim()) body.comment = comment.value.trim();
      try {
        const after = await api("/v1/approvals", { method: "POST", body });
        clearBanner();
        showBanner(
          `${decision === "approve" ? "Approved" : "Denied"}: ${after.id} is now in ${after.state}.`,
          "ok",
        );
      } catch (exc) {
        if (exc instanceof ApiError && exc.code === "version_conflict") {
          showBanner(
            "The workflow changed while you were looking at it: check it again and decide.",
            "warn",
          );
        } else {
          reportError(exc);
        }
      } finally {
        this.busy = false;
        this.version = null; // re-render everything from the server's answer
        await refresh();
      }
    }

    /** Operator actions (resume, fork, move), shown only to callers the API lets take them
     * (the workflow's `operator_actions`); each is one logged transition with the reason. A
     * workflow parked because a step's outcome is unknown gets the two answers for that step
     * (`resolve_step`) instead of "Re-run state", which would only park it again. */
    renderOperator(wf) {
      const actions = wf.operator_actions || [];
      if (!actions.length) {
        fill(this.operator);
        return;
      }
      const typed = $("#op-reason", this.operator); // kept across refreshes
      const reason = h("input", {
        id: "op-reason",
        type: "text",
        maxlength: 1000,
        placeholder: "Why (required; kept in the history)",
      });
      if (typed) reason.value = typed.value;
      const status = h("span", { class: "decision-status", id: "op-status", role: "status" });
      const controls = [];
      const unknown = actions.includes("resolve_step") ? wf.unresolved_steps || [] : [];
      const resolve = unknown.length ? this.resolveControls(wf, unknown[0], reason, status) : null;
      if (actions.includes("resume")) {
        controls.push(
          h(
            "button",
            {
              type: "button",
              id: "op-resume",
              title: `Run the ${wf.state} handler again (finished steps keep their results)`,
              onclick: () => this.operate(wf, "resume", reason, status, {}),
            },
            "Re-run state",
          ),
        );
      }
      if (actions.includes("fork")) {
        const typedVersion = $("#op-fork-version", this.operator); // kept across refreshes
        const version = h("input", {
          id: "op-fork-version",
          type: "number",
          min: 1,
          max: wf.version,
          placeholder: `version (latest: ${wf.version})`,
        });
        if (typedVersion) version.value = typedVersion.value;
        // Forking from an earlier version runs the steps done after it again, under the
        // fork's keys: the server refuses (naming them) unless this box is ticked.
        const rerun = h("input", { id: "op-fork-rerun", type: "checkbox" });
        controls.push(
          version,
          h(
            "label",
            {
              class: "inline",
              for: "op-fork-rerun",
              title: "Steps done after the version you fork from are called again by the fork",
            },
            rerun,
            " run again the steps done after that version",
          ),
          h(
            "button",
            {
              type: "button",
              id: "op-fork",
              class: "secondary",
              title:
                "Start a new workflow from this one as of a version of its history. Steps " +
                "done after that version run again in the fork, under its own keys (a charge " +
                "is made twice): tick the box to allow it.",
              onclick: () =>
                this.operate(wf, "fork", reason, status, {
                  version: version.value ? Number(version.value) : undefined,
                  rerunSteps: rerun.checked,
                }),
            },
            "Fork",
          ),
        );
      }
      if (actions.includes("move")) {
        const t = typeOf(wf);
        const states = t ? t.states.map((s) => s.name).filter((n) => n !== wf.state) : [];
        const target = h(
          "select",
          { id: "op-move-state", "aria-label": "State to move to" },
          states.map((n) => h("option", { value: n }, n)),
        );
        controls.push(
          target,
          h(
            "button",
            {
              type: "button",
              id: "op-move",
              class: "secondary",
              title: "Admins: move it to a state outside the machine's edges",
              onclick: () => this.operate(wf, "move", reason, status, { state: target.value }),
            },
            "Move",
          ),
        );
      }
      fill(
        this.operator,
        h(
          "section",
          { class: "panel operator", id: "operator-actions" },
          h("h2", {}, "Operator actions"),
          h(
            "p",
            { class: "muted" },
            "Each action is one transition in the history, with you as the actor and the reason.",
          ),
          h("label", { for: "op-reason" }, "Reason"),
          reason,
          resolve,
          h("div", { class: "actions" }, ...controls, status),
        ),
      );
    }

    /** The answer for a step whose outcome is unknown: the call happened (with the result
     * the external system holds: the step returns it) or it did not (the step runs again).
     * Either resumes the workflow (POST .../steps/{step}/resolve, operators and admins). */
    resolveControls(wf, step, reason, status) {
      const typed = $("#op-resolve-result", this.operator); // kept across refreshes
      const result = h("textarea", {
        id: "op-resolve-result",
        rows: 2,
        maxlength: 262144,
        placeholder: 'Its result as the external system holds it (JSON): {"charge_id": "ch_1"}',
      });
      if (typed) result.value = typed.value;
      const answer = (verdict) =>
        this.operate(wf, "resolve", reason, status, { step, verdict, result });
      return h(
        "div",
        { class: "resolve-step", id: "resolve-step", "data-step": step },
        h(
          "p",
          {},
          "Parked: the outcome of step ",
          h("strong", {}, step),
          " is unknown (its call may or may not have reached the other side). Check the " +
            "external system, then answer; the workflow then runs on.",
        ),
        h("label", { for: "op-resolve-result" }, "Result of the call"),
        result,
        h(
          "div",
          { class: "actions" },
          h(
            "button",
            {
              type: "button",
              id: "op-resolve-applied",
              class: "approve",
              title: `Step ${step} took effect: it returns this result and never calls out again`,
              onclick: () => answer("applied"),
            },
            "The call happened (with its result)",
          ),
          h(
            "button",
            {
              type: "button",
              id: "op-resolve-not-applied",
              class: "deny",
              title: `Step ${step} never took effect: it runs again`,
              onclick: () => answer("not_applied"),
            },
            "It did not",
          ),
        ),
      );
    }

    async operate(wf, action, reason, status, options) {
      if (this.busy) return;
      const why = reason.value.trim();
      if (!why) {
        status.textContent = "Give a reason first: it is kept in the history.";
        reason.focus();
        return;
      }
      let outcome;
      if (action === "resolve" && options.verdict === "applied") {
        const text = options.result.value.trim();
        try {
          if (!text) throw new SyntaxError("empty");
          outcome = JSON.parse(text);
        } catch (_exc) {
          status.textContent =
            "Give the call's result as JSON (null if it returned nothing): the step returns it.";
          options.result.focus();
          return;
        }
      }
      this.busy = true;
      for (const b of this.operator.querySelectorAll("button")) b.disabled = true;
      status.textContent = "Working…";
      const path = `/v1/workflows/${enc(wf.id)}/${action}`;
      try {
        if (action === "resolve") {
          const body = { verdict: options.verdict, reason: why };
          if (options.verdict === "applied") body.result = outcome;
          const step = `/v1/workflows/${enc(wf.id)}/steps/${enc(options.step)}/resolve`;
          await api(step, { method: "POST", body });
          showBanner(
            options.verdict === "applied"
              ? `Step ${options.step} resolved as applied: ${wf.id} runs on with its result.`
              : `Step ${options.step} resolved as not applied: ${wf.id} runs it again.`,
            "ok",
          );
          options.result.value = "";
        } else if (action === "resume") {
          const after = await api(path, { method: "POST", body: { reason: why } });
          showBanner(`Resumed: ${after.id} runs its ${after.state} handler again.`, "ok");
        } else if (action === "move") {
          const body = { state: options.state, reason: why, expected_version: wf.version };
          const after = await api(path, { method: "POST", body });
          showBanner(`Moved: ${after.id} is now in ${after.state}.`, "ok");
        } else {
          const body = { reason: why };
          if (options.version !== undefined) body.version = options.version;
          if (options.rerunSteps) body.rerun_steps = true;
          const fork = await api(path, { method: "POST", body });
          // The route change clears the banner first (see main); then this one shows.
          window.addEventListener(
            "hashchange",
            () => showBanner(`Forked ${wf.id} into ${fork.id}, in ${fork.state}.`, "ok"),
            { once: true },
          );
          location.hash = `#/workflows/${enc(fork.id)}`;
          return;
        }
        reason.value = "";
      } catch (exc) {
        if (exc instanceof ApiError && exc.code === "version_conflict") {
          showBanner("The workflow changed while you were looking at it: check it again.", "warn");
        } else {
          reportError(exc);
        }
      } finally {
        this.busy = false;
        this.version = null; // re-render everything from the server's answer
        await refresh();
      }
    }

    /** The workflow's children (the first CHILDREN_SHOWN), each a link to its page. */
    async renderChildren(wf) {
      const counts = wf.children;
      if (!counts || !counts.total) {
        this.children.hidden = true;
        fill(this.children);
        return;
      }
      const page = await api(`/v1/workflows/${enc(this.id)}/children?limit=${CHILDREN_SHOWN}`);
      if (this.disposed) return;
      const t = now();
      const outcome = (c) =>
        c.succeeded === null
          ? h("span", { class: "muted" }, "—")
          : h(
              "span",
              { class: `outcome ${c.succeeded ? "ok" : "failed"}` },
              c.succeeded ? "succeeded" : "failed",
            );
      this.children.hidden = false;
      fill(
        this.children,
        h(
          "div",
          { class: "panel-head" },
          h("h2", {}, "Children"),
          h("span", { class: "muted", id: "children-counts" }, counts.text),
        ),
        h(
          "table",
          { class: "table", id: "children" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["Child", "Type", "State", "Outcome", "In state for"].map((c) => h("th", {}, c)),
            ),
          ),
          h(
            "tbody",
            {},
            page.items.map((c) =>
              h(
                "tr",
                { class: "child-row", "data-id": c.id, "data-state": c.state },
                h(
                  "td",
                  {},
                  h("a", { class: "child-link", href: `#/workflows/${enc(c.id)}` }, c.id),
                ),
                h("td", {}, c.type),
                h("td", {}, stateBadge(c), c.parked ? parkedBadge(c) : null),
                h("td", {}, outcome(c)),
                h("td", { class: "num" }, duration(t - c.state_entered_at)),
              ),
            ),
          ),
        ),
        page.next_cursor
          ? h(
              "p",
              { class: "muted", id: "children-more" },
              `The first ${page.items.length.toLocaleString()} children; the others are not shown.`,
            )
          : null,
      );
    }

    renderSummary(wf) {
      const s = wf.summary;
      // The type's own summary text, when it has one (textContent: never markup).
      const text = wf.summary_text
        ? h("p", { class: "summary-text", id: "summary-text" }, wf.summary_text)
        : null;
      if (s && typeof s === "object" && !Array.isArray(s)) {
        const keys = Object.keys(s);
        fill(
          this.summary,
          text,
          keys.length
            ? h(
                "table",
                { class: "kv", id: "summary-table" },
                h(
                  "tbody",
                  {},
                  keys.map((k) =>
                    h(
                      "tr",
                      { "data-key": k },
                      h("th", {}, k),
                      h(
                        "td",
                        {},
                        typeof s[k] === "string" ? s[k] : h("code", {}, compactJson(s[k])),
                      ),
                    ),
                  ),
                ),
              )
            : text
              ? null
              : h("p", { class: "muted" }, "The context is empty."),
        );
      } else {
        fill(this.summary, text, h("pre", {}, JSON.stringify(s, null, 2)));
      }
    }

    renderHistory(wf, history) {
      const t = typeOf(wf);
      const approval = new Set(t ? t.events.filter((e) => e.approval).map((e) => e.name) : []);
      fill(
        this.history,
        ...history.map((rec) => {
          const payload = { ...(rec.payload || {}) };
          const details = [];
          if (typeof payload.approver === "string") {
            details.push(
              h("span", { class: "approver" }, "approver: ", h("strong", {}, payload.approver)),
            );
            delete payload.approver;
          }
          if (typeof payload.comment === "string") {
            details.push(h("q", { class: "comment" }, payload.comment));
            delete payload.comment;
          }
          if (Array.isArray(payload.compensated)) {
            // A compensating transition: the steps it undid first, newest first.
            const undone = payload.compensated.join(", ") || "nothing to undo";
            details.push(
              h("span", { class: "compensated" }, "compensated: ", h("strong", {}, undone)),
            );
            delete payload.compensated;
          }
          if (Object.keys(payload).length)
            details.push(h("code", { class: "payload" }, compactJson(payload)));
          if (rec.context_patch && Object.keys(rec.context_patch).length) {
            details.push(
              h(
                "details",
                { class: "patch" },
                h("summary", {}, "context change"),
                h("code", {}, compactJson(rec.context_patch)),
              ),
            );
          }
          return h(
            "tr",
            {
              class: `history-row${approval.has(rec.event) ? " approval" : ""}`,
              "data-event": rec.event,
              "data-version": rec.version,
            },
            h("td", { class: "num" }, rec.version),
            h("td", {}, timeEl(rec.at)),
            h("td", {}, h("span", { class: "event" }, rec.event)),
            h(
              "td",
              {},
              rec.from_state === null ? h("span", { class: "muted" }, "start") : rec.from_state,
              " → ",
              rec.to_state,
            ),
            h("td", { class: "actor" }, rec.actor),
            h("td", { class: "details" }, details),
          );
        }),
      );
    }

    async renderDiagram(wf) {
      const key = `${wf.type}@${wf.machine_version}:${wf.state}`;
      if (key === this.diagramKey) return;
      const text = await api(
        `/v1/types/${enc(wf.type)}/diagram?version=${enc(wf.machine_version)}&current=${enc(wf.state)}`,
        { text: true },
      );
      const rendered = await renderDiagram(text, wf.state);
      if (this.disposed) return;
      fill(this.diagram, rendered);
      this.diagramKey = key;
    }

    dispose() {
      this.disposed = true;
      clearTimeout(this.debounce);
      if (this.unfollow) this.unfollow();
    }
  }

  // -- routing and refreshing ----------------------------------------------------------------

  let page = null;
  let refreshing = null;
  let again = false;

  function route() {
    if (page) page.dispose();
    const hash = location.hash || "#/";
    const match = /^#\/workflows\/([^?]+)/.exec(hash);
    if (match) {
      page = new DetailPage(decodeURIComponent(match[1]));
    } else {
      document.title = "Workflows · statewright";
      page = new ListPage(new URLSearchParams(hash.split("?")[1] || ""));
    }
    fill($("#view"), page.root);
    return refresh();
  }

  /** Refresh the page on view; calls while one runs coalesce into one more run. */
  async function refresh() {
    if (refreshing) {
      again = true;
      return refreshing;
    }
    refreshing = (async () => {
      do {
        again = false;
        const current = page;
        try {
          if (!types.loaded) await loadTypes();
          await current.refresh();
          if ($("#banner").dataset.source === "refresh") clearBanner();
        } catch (exc) {
          reportError(exc, "refresh");
        }
      } while (again);
    })();
    try {
      await refreshing;
    } finally {
      refreshing = null;
    }
  }

  // Live updates. Every page polls; a workflow's page also follows the transition stream
  // (GET /v1/stream, when the service has it) from its last known transition, so it moves as
  // soon as the workflow does. The overview only polls: its ages change with time anyway.
  const live = { timer: null, streaming: false, hasStream: null };

  function setLive(streaming) {
    live.streaming = streaming;
    const el = $("#live");
    el.className = `live${streaming ? " streaming" : ""}`;
    el.textContent = streaming ? "live" : "auto-refresh";
    el.title = streaming ? "Follows the transition stream" : `Refreshes every ${POLL_MS / 1000}s`;
    clearInterval(live.timer);
    live.timer = setInterval(
      () => {
        if (!document.hidden) refresh();
      },
      streaming ? LIVE_POLL_MS : POLL_MS,
    );
  }

  /** Whether the service has the stream (read once from its OpenAPI document). */
  function hasStream() {
    if (live.hasStream === null) {
      live.hasStream = fetch("/openapi.json", { cache: "no-store" })
        .then((resp) => (resp.ok ? resp.json() : {}))
        .then((doc) => Boolean(doc.paths && doc.paths["/v1/stream"]))
        .catch(() => false);
    }
    return live.hasStream;
  }

  /** Follow one workflow's transitions after `seq`; returns a function that stops. */
  function follow(workflowId, seq, onTransition) {
    let source = null;
    let stopped = false;
    hasStream().then((yes) => {
      if (!yes || stopped || typeof EventSource === "undefined") return;
      const query = new URLSearchParams({ after: String(seq) });
      if (getToken()) query.set("access_token", getToken());
      source = new EventSource(`/v1/stream?${query}`);
      source.addEventListener("open", () => setLive(true));
      source.addEventListener("error", () => {
        if (source.readyState === EventSource.CLOSED) setLive(false);
      });
      source.addEventListener("transition", (ev) => {
        let rec = {};
        try {
          rec = JSON.parse(ev.data);
        } catch (_) {
          return;
        }
        if (rec.workflow_id === workflowId) onTransition(rec);
      });
    });
    return () => {
      stopped = true;
      if (source) source.close();
      setLive(false);
    };
  }

  function setupToken() {
    const input = $("#token");
    input.value = getToken();
    $("#token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const value = input.value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      else sessionStorage.removeItem(TOKEN_KEY);
      tokenChanged();
    });
    $("#token-clear").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.value = "";
      tokenChanged();
    });
  }

  function tokenChanged() {
    clearBanner();
    types.loaded = false;
    $("#whoami").textContent = "";
    route();
  }

  function main() {
    setupToken();
    window.addEventListener("hashchange", () => {
      clearBanner();
      route();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh();
    });
    setLive(false);
    route();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();
