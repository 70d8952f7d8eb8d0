/* statewright dashboard: the workflow list's "Bulk action" panel, a client of POST /v1/bulk.
 *
 * Loaded before app.js, which calls window.statewrightBulk.update() on each refresh of the
 * list page with its helpers (h, fill, api...), the list's filter and the workflows it read.
 * The panel is shown only to a caller the API lets take bulk actions, as GET /v1/me says
 * (bulk_actions: operators and admins; "move" for admins), even before anything is listed.
 * The API checks the same roles again and refuses (403) anyone else.
 *
 * "Dry run" counts the matches and samples their ids, changing nothing, under a new
 * operation id; "Apply" (after a confirm) sends the same request for real with that id, so
 * a double click or a retry after an error is the same operation and applies nothing twice.
 * A fork or move applies to the workflows that had entered their state by the dry run (its
 * entered_before), so that Apply again does not fork the forks or match what it moved.
 * Changing any field forgets the dry run: Apply needs a new one. Every value from the server
 * reaches the page through textContent (h()), never as HTML.
 */
(() => {
  "use strict";

  const ACTIONS = [
    ["cancel", "Cancel"],
    ["resume", "Resume (parked ones: run the state again)"],
    ["retry", "Retry (due again; an unresolved step's reconcile asked again)"],
    ["fork", "Fork"],
  ];
  const MOVE = ["move", "Move to a state (admins)"];
  const PARKED = [
    ["", "parked or not"],
    ["any", "parked, any reason"],
    ["step_outcome_unknown", "parked: step_outcome_unknown"],
    ["fatal_error", "parked: fatal_error"],
    ["retries_exhausted", "parked: retries_exhausted"],
  ];
  const INCLUDE = [
    ["", "live workflows"],
    ["finished", "finished workflows"],
    ["all", "live and finished"],
  ];
  const SAMPLE = 20;
  const CUT_OFF = new Set(["fork", "move"]);

  /** A new operation id: 16 random bytes in hex (crypto.getRandomValues also works outside a
   * secure context, unlike randomUUID). */
  function operationId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return `ui-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
  }

  /** Whether the caller may take operator actions, and move, from what the API says of the
   * listed workflows (null: it cannot tell, nothing is listed): where GET /v1/me cannot say. */
  function rights(rows) {
    if (!rows.length) return null;
    const offered = rows.flatMap((wf) => wf.operator_actions || []);
    return { operator: offered.length > 0, admin: offered.includes("move") };
  }

  class BulkPanel {
    constructor(ctx, admin) {
      this.ctx = ctx;
      this.admin = admin;
      this.planned = null; // the body of the last dry run, and its operation id
      const { h } = ctx;
      const typeNames = [...ctx.types.byName.keys()].sort();
      this.type = h(
        "select",
        { id: "bulk-type", "aria-label": "Type" },
        h("option", { value: "" }, "any type"),
        typeNames.map((n) => h("option", { value: n }, n)),
      );
      this.type.value = ctx.filter.type || "";
      this.state = h("input", {
        id: "bulk-state",
        type: "text",
        placeholder: "any state",
        list: "bulk-states",
        "aria-label": "State",
      });
      this.state.value = ctx.filter.state || "";
      this.states = h("datalist", { id: "bulk-states" });
      this.parked = h(
        "select",
        { id: "bulk-parked", "aria-label": "Parked" },
        PARKED.map(([v, label]) => h("option", { value: v }, label)),
      );
      this.include = h(
        "select",
        { id: "bulk-include", "aria-label": "Live or finished" },
        INCLUDE.map(([v, label]) => h("option", { value: v }, label)),
      );
      this.age = h("input", {
        id: "bulk-older-than",
        type: "number",
        min: 0,
        step: "any",
        placeholder: "older than (minutes)",
        "aria-label": "In their state for longer than (minutes)",
      });
      this.where = h("input", {
        id: "bulk-where",
        type: "text",
        placeholder: "search attributes (name=value, ...)",
        "aria-label": "Search attributes",
      });
      this.where.value = ctx.filter.where || "";
      this.action = h(
        "select",
        { id: "bulk-action-kind", "aria-label": "Action" },
        (admin ? [...ACTIONS, MOVE] : ACTIONS).map(([v, label]) =>
          h("option", { value: v }, label),
        ),
      );
      this.toState = h("input", {
        id: "bulk-to-state",
        type: "text",
        placeholder: "move to state",
        list: "bulk-states",
        hidden: true,
        "aria-label": "Move to state",
      });
      this.reason = h("input", {
        id: "bulk-reason",
        type: "text",
        maxlength: 1000,
        placeholder: "Why (required; kept in each workflow's history)",
      });
      this.dryButton = h(
        "button",
        {
          type: "button",
          id: "bulk-dry-run",
          class: "secondary",
          onclick: () => this.dryRun(),
        },
        "Dry run",
      );
      this.applyButton = h(
        "button",
        {
          type: "button",
          id: "bulk-apply",
          class: "deny",
          disabled: true,
          onclick: () => this.apply(),
        },
        "Apply",
      );
      this.status = h("div", { class: "action-status", id: "bulk-status", role: "status" });
      this.result = h("div", { class: "bulk-result", id: "bulk-result" });
      const fields = [
        this.type,
        this.state,
        this.include,
        this.parked,
        this.age,
        this.where,
        this.action,
        this.toState,
      ];
      for (const el of [...fields, this.reason]) {
        el.addEventListener("input", () => this.changed());
        el.addEventListener("change", () => this.changed());
      }
      this.fillStates();
      this.el = h(
        "details",
        { class: "panel bulk-panel", id: "bulk-panel" },
        h("summary", {}, "Bulk action"),
        h(
          "p",
          { class: "muted" },
          "Act on every workflow the filter matches (live ones unless you choose), in your " +
            "tenant. A dry run counts and " +
            "samples them and changes nothing; Apply runs the same operation for real, once.",
        ),
        h(
          "div",
          { class: "actions" },
          h("span", {}, "Filter: "),
          [
            this.type,
            this.state,
            this.states,
            this.include,
            this.parked,
            this.age,
            this.where,
          ],
        ),
        h(
          "div",
          { class: "actions" },
          h("span", {}, "Action: "),
          [this.action, this.toState, this.reason],
        ),
        h("div", { class: "actions" }, this.dryButton, this.applyButton),
        this.status,
        this.result,
      );
    }

    /** The state names of the chosen type (all types' without one), as suggestions. */
    fillStates() {
      const { h, fill, types } = this.ctx;
      const chosen = types.byName.get(this.type.value);
      const all = chosen ? [chosen] : [...types.byName.values()];
      const names = [...new Set(all.flatMap((t) => t.states.map((s) => s.name)))].sort();
      fill(this.states, names.map((n) => h("option", { value: n })));
    }

    /** Any change forgets the dry run: Apply needs a new one for what is shown. */
    changed() {
      this.toState.hidden = this.action.value !== "move";
      this.fillStates();
      if (this.planned) {
        this.planned = null;
        this.applyButton.disabled = true;
        this.ctx.fill(this.result);
      }
    }

    /** The request of the fields, or an error message. */
    body() {
      const reason = this.reason.value.trim();
      if (!reason) return { error: "Give a reason: it is written in each workflow's history." };
      const filter = {};
      if (this.type.value) filter.type = this.type.value;
      if (this.state.value.trim()) filter.state = this.state.value.trim();
      if (this.include.value === "finished") filter.terminal = true;
      else if (this.include.value === "all") filter.terminal = null;
      if (this.parked.value === "any") filter.parked = true;
      else if (this.parked.value) filter.parked_reason = this.parked.value;
      if (this.age.value !== "") {
        const minutes = Number(this.age.value);
        if (!Number.isFinite(minutes) || minutes < 0) {
          return { error: "The age is a number of minutes." };
        }
        filter.older_than = minutes * 60;
      }
      const search = {};
      for (const pair of this.where.value.split(",")) {
        if (!pair.trim()) continue;
        const at = pair.indexOf("=");
        if (at < 1) return { error: `A search attribute is name=value, not "${pair.trim()}".` };
        search[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
      }
      if (Object.keys(search).length) filter.search = search;
      const body = { action: this.action.value, filter, reason, sample: SAMPLE };
      if (body.action === "move") {
        if (!this.toState.value.trim()) return { error: "Name the state to move them to." };
        body.to_state = this.toState.value.trim();
      }
      return { body };
    }

    busy(on) {
      this.dryButton.disabled = on;
      this.applyButton.disabled = on || !this.planned;
    }

    async dryRun() {
      const { fill } = this.ctx;
      const read = this.body();
      if (read.error) {
        fill(this.status, read.error);
        return;
      }
      const body = { ...read.body, dry_run: true, operation_id: operationId() };
      this.planned = null;
      fill(this.result);
      fill(this.status);
      this.busy(true);
      try {
        const dry = await this.ctx.api("/v1/bulk", { method: "POST", body });
        this.planned = {
          body: read.body,
          operationId: dry.operation_id,
          matched: dry.matched,
          enteredBefore: dry.entered_before,
        };
        this.show(dry);
      } catch (exc) {
        this.refused(exc);
      } finally {
        this.busy(false);
      }
    }

    async apply() {
      const { fill } = this.ctx;
      const plan = this.planned;
      if (!plan) {
        fill(this.status, "Dry run first.");
        return;
      }
      const what = plan.body.action === "move" ? `move to ${plan.body.to_state}` : plan.body.action;
      const sure = window.confirm(
        `${what}: ${plan.matched} workflow(s) matched the dry run (and any that match now). ` +
          `Reason: "${plan.body.reason}". Apply?`,
      );
      if (!sure) return;
      const body = { ...plan.body, dry_run: false, operation_id: plan.operationId };
      if (CUT_OFF.has(body.action)) {
        // Only what had entered its state by the dry run: the forks a run makes (in the
        // same state) and the workflows it moves are not matched by Apply again.
        body.filter = { ...body.filter, entered_before: plan.enteredBefore };
      }
      fill(this.status);
      this.busy(true);
      fill(this.result, this.ctx.h("p", { class: "muted" }, `Applying ${plan.operationId}…`));
      try {
        const done = await this.ctx.api("/v1/bulk", { method: "POST", body });
        this.show(done);
        this.ctx.showBanner(
          `Bulk ${done.action}: ${done.applied} applied, ${done.replayed} already done, ` +
            `${done.skipped} skipped, ${done.failed} failed.`,
          done.failed ? "warn" : "ok",
        );
        this.ctx.refresh();
      } catch (exc) {
        // Nothing is lost: Apply again sends the same operation id (what was done is not
        // done twice).
        this.refused(exc);
        const again = `Not finished: Apply again resumes ${plan.operationId}.`;
        fill(this.result, this.ctx.h("p", { class: "muted" }, again));
      } finally {
        this.busy(false);
      }
    }

    refused(exc) {
      this.ctx.fill(this.status, this.ctx.refusalList(exc));
      this.ctx.reportError(exc);
    }

    /** A dry run's or a real run's answer: the counts, the sample and why some were not
     * done, each id a link to its page. */
    show(r) {
      const { h, fill, enc } = this.ctx;
      const link = (id) => h("a", { class: "wf-link", href: `#/workflows/${enc(id)}` }, id);
      const counts = r.dry_run
        ? [["matched", r.matched]]
        : [
            ["matched", r.matched],
            ["applied", r.applied],
            ["replayed", r.replayed],
            ["skipped", r.skipped],
            ["failed", r.failed],
          ];
      const errors = Object.entries(r.errors || {});
      fill(
        this.result,
        h(
          "p",
          { id: "bulk-summary", "data-dry-run": r.dry_run ? "1" : "0" },
          r.dry_run
            ? `Dry run: ${r.matched} workflow(s) match; nothing was changed.`
            : `Done: ${r.action} applied to ${r.applied} workflow(s).`,
          " ",
          h("span", { class: "muted", id: "bulk-operation" }, `operation ${r.operation_id}`),
        ),
        h(
          "div",
          { class: "bulk-counts" },
          counts.map(([name, n]) =>
            h("span", { class: "chip", id: `bulk-${name}`, "data-count": n }, `${name} ${n}`),
          ),
        ),
        r.sample.length
          ? h(
              "div",
              { id: "bulk-sample" },
              h(
                "span",
                { class: "muted" },
                r.sample.length < r.matched ? `First ${r.sample.length}: ` : "Matched: ",
              ),
              r.sample.map((id, i) => [i ? ", " : "", link(id)]),
            )
          : null,
        errors.length
          ? h(
              "ul",
              { id: "bulk-errors" },
              errors.map(([id, why]) => h("li", { "data-id": id }, link(id), ` — ${why}`)),
            )
          : null,
      );
      this.applyButton.disabled = !this.planned;
    }
  }

  let current = null; // { slot, panel } kept across refreshes of one list page
  let asked = null; // { slot, who }: GET /v1/me, asked once per list page (a new token: a new page)

  /** What the caller may do in bulk, from GET /v1/me (null when the service cannot say:
   * then from the listed workflows' operator actions, or nothing when none is listed). */
  async function callerRights(slot, ctx) {
    if (!asked || asked.slot !== slot) {
      asked = { slot, who: ctx.api("/v1/me").catch(() => null) };
    }
    const who = await asked.who;
    if (!who || !Array.isArray(who.bulk_actions)) return rights(ctx.rows);
    return { operator: who.bulk_actions.length > 0, admin: who.bulk_actions.includes("move") };
  }

  window.statewrightBulk = {
    /** Show the panel in `slot` for a caller who may use it (once per list page: what is
     * typed and the dry run survive refreshes); hide it for anyone else. */
    async update(slot, ctx) {
      const may = await callerRights(slot, ctx);
      if (may === null) return; // nothing known: keep what is shown
      if (!may.operator) {
        ctx.fill(slot);
        current = null;
        return;
      }
      // Kept unless it now learns the caller may also move.
      if (current && current.slot === slot && (current.panel.admin || !may.admin)) return;
      const panel = new BulkPanel(ctx, may.admin);
      current = { slot, panel };
      ctx.fill(slot, panel.el);
    },
  };
})();
