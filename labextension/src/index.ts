/**
 * The session's GPU state inside JupyterLab: a status bar item ("GPU idle 42 min · stopped
 * at 14:05 unless used", and a sparkline of the GPU's last two hours) and, while the reclaim
 * service warns, a notification with Keep alive 2 h, Keep until… and Stop now. Before a
 * reclaim stops the server, its documents with unsaved changes are saved (saving.ts); as it
 * stops, the tab says why, what is kept, and offers Start again (stopped.ts).
 *
 * Everything goes through this server's own extension (`gpu-reclaim/…` under the server's
 * base URL), which calls the service with the server's token: the browser holds no new
 * secret. Where the service is absent the extension shows nothing.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { localClock } from '../../static/localtime';
import { SaveBeforeStop } from './saving';
import { AfterStop } from './stopped';
import { hoverText, IReason, warningMessage, whyText } from './warning';

/** How often the state is read while the tab is shown (the service answers from memory; one cycle is ~30 s). */
const POLL_MS = 10_000;
/** How often the state is asked again of a server without the server side (404): the
 * server side comes only with a restart of the server, and each request is its activity. */
const NOT_INSTALLED_POLL_MS = 600_000;
/** The one console line for an admin when the server side is missing. */
const NOT_INSTALLED =
  'jupyterhub-gpu-reclaim: this server has no gpu-reclaim/status (404): the extension\'s server side is not ' +
  'installed or not enabled, so JupyterLab shows no GPU state. Run `python -m jupyterhub_gpu_reclaim_lab.install_check` ' +
  'in the server\'s environment (docs/troubleshooting.md).';
const KEEP_HOURS = 2;
/** How the status bar and the notification write an idleness shorter than a minute. */
const UNDER_A_MINUTE = '<1 min';
/** The sparkline's size in the status bar (24 px high). */
const SPARK_WIDTH = 60;
const SPARK_HEIGHT = 16;
const SVG = 'http://www.w3.org/2000/svg';
const STOPPING = 'GPU · stopping the server';

/** What `GET gpu-reclaim/status` answers (jupyterhub_gpu_reclaim/labext/handlers.py). */
interface ISession extends IReason {
  state: string; // active, idle, warned, kept, exempt, stopping, held, cpu
  gpus: number;
  gpus_text: string; // "1 MIG slice", as the service's pages name them ("": an older service)
  util: string; // "37 %", as the service's pages write it
  idle_since: string | null;
  reclaim_at: string | null;
  intent_until: string | null;
  exempt_until: string | null;
  spark: (number | null)[]; // percent per slice of the service's window, oldest first
  spark_label: string; // "GPU utilization over the last 2 h, latest 3 %; idle below 1 %"
  idle_threshold: number | null; // percent, drawn dashed
}

interface IStatus {
  available: boolean;
  session?: ISession | null;
  max_keepalive_seconds?: number;
  keeps?: string;
  loses?: string;
}

/** A time in the browser's own zone as the service's pages write it ("14:05"; with its date
 * on another day): their one rule (static/localtime.js). */
function clock(iso: string): string {
  return localClock(new Date(iso));
}

/** The same moment as the hover text says it: in the browser's zone, as the item and the
 * notification say it, then in UTC ("08:33 (2026-12-05 13:33 UTC)"), as the service's pages
 * give a time's UTC on hover. */
function hoverClock(iso: string): string {
  return `${clock(iso)} (${new Date(iso).toISOString().slice(0, 16).replace('T', ' ')} UTC)`;
}

/** How long since `iso` as the service's pages write a duration (durations.format_duration:
 * "42 min", "1 h", "2 h 5 min", "2 d 3 h", rounded down); "<1 min" under a minute, as the
 * item is written every 10 s. */
function ago(iso: string): string {
  const minutes = Math.max(0, Math.floor((Date.now() - new Date(iso).getTime()) / 60_000));
  const [d, h, m] = [Math.floor(minutes / 1440), Math.floor(minutes / 60) % 24, minutes % 60];
  return d ? `${d} d${h ? ` ${h} h` : ''}` : h ? `${h} h${m ? ` ${m} min` : ''}` : m ? `${m} min` : UNDER_A_MINUTE;
}

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  return node;
}

/**
 * The session's utilization as the service's user page draws it (web/render.py `sparkline`):
 * oldest left, gaps where there is no data, a lone sample as a dot, the idle threshold
 * dashed, a baseline. Null where there is no series. Built from numbers only (no markup).
 */
export function sparkline(s: ISession): SVGSVGElement | null {
  const values = s.spark ?? [];
  if (!values.length) {
    return null;
  }
  const [w, h] = [SPARK_WIDTH, SPARK_HEIGHT];
  const step = w / Math.max(1, values.length - 1);
  const y = (v: number) => (h - 1 - (Math.min(100, Math.max(0, v)) / 100) * (h - 2)).toFixed(1);
  const root = svg('svg', { class: 'jp-GpuReclaim-spark', width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: 'img' });
  root.setAttribute('aria-label', s.spark_label);
  const title = svg('title', {});
  title.textContent = s.spark_label; // the hover text of the sparkline itself
  root.appendChild(title);
  root.appendChild(svg('line', { x1: 0, x2: w, y1: h - 0.5, y2: h - 0.5, class: 'jp-GpuReclaim-spark-base' }));
  if (typeof s.idle_threshold === 'number') {
    const t = y(s.idle_threshold);
    root.appendChild(
      svg('line', { x1: 0, x2: w, y1: t, y2: t, class: 'jp-GpuReclaim-spark-threshold', 'stroke-dasharray': '3 2' })
    );
  }
  const segments: string[][] = [[]];
  values.forEach((v, i) => {
    if (v === null) {
      if (segments[segments.length - 1].length) {
        segments.push([]);
      }
    } else {
      segments[segments.length - 1].push(`${(i * step).toFixed(1)},${y(v)}`);
    }
  });
  for (const points of segments.filter(p => p.length)) {
    if (points.length > 1) {
      root.appendChild(svg('polyline', { points: points.join(' '), fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5 }));
    } else {
      const [cx, cy] = points[0].split(',');
      root.appendChild(svg('circle', { cx, cy, r: 1.5, fill: 'currentColor' }));
    }
  }
  return root;
}

/** The status bar's text and hover text for a session (null: nothing to show). */
export function describe(s: ISession): { text: string; title: string } | null {
  if (!s.gpus) {
    return null;
  }
  const idle = s.idle_since ? `GPU idle ${ago(s.idle_since)}` : `GPU ${s.util}`;
  const gpus = s.gpus_text || `${s.gpus} GPU${s.gpus > 1 ? 's' : ''}`; // an older service gives no words
  switch (s.state) {
    case 'warned':
      return s.reclaim_at
        ? {
            text: `${idle} · stopped at ${clock(s.reclaim_at)} unless used`,
            title: `The server is stopped at ${hoverClock(s.reclaim_at)} unless its GPU is used or it is kept alive`
          }
        : { text: idle, title: '' };
    case 'kept':
      return s.intent_until
        ? {
            text: `GPU ${s.util} · kept alive until ${clock(s.intent_until)}`,
            title: `Kept alive until ${hoverClock(s.intent_until)}`
          }
        : { text: `GPU ${s.util}`, title: '' };
    case 'exempt':
      return {
        text: `GPU ${s.util} · exempt` + (s.exempt_until ? ` until ${clock(s.exempt_until)}` : ''),
        title: s.exempt_until ? `Exempt from reclaim until ${hoverClock(s.exempt_until)}` : 'Exempt from reclaim'
      };
    case 'stopping':
      return { text: STOPPING, title: '' };
    case 'idle':
      return {
        text: idle,
        title: s.idle_since ? `GPU not used since ${hoverClock(s.idle_since)}` : ''
      };
    default:
      return { text: `GPU ${s.util}`, title: `GPU utilization now (${gpus})` };
  }
}

async function call(
  settings: ServerConnection.ISettings,
  path: string,
  init: RequestInit = {}
): Promise<{ ok: boolean; status: number; body: any }> {
  const url = URLExt.join(settings.baseUrl, 'gpu-reclaim', path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  let body: any = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  return { ok: response.ok, status: response.status, body };
}

/** The next HH:MM (local) from now, as an ISO time with the browser's offset. */
function nextLocal(hhmm: string): Date | null {
  const m = /^(\d{1,2}):(\d{2})$/.exec(hhmm);
  if (!m) {
    return null;
  }
  const t = new Date();
  t.setHours(Number(m[1]), Number(m[2]), 0, 0);
  if (t.getTime() <= Date.now()) {
    t.setDate(t.getDate() + 1);
  }
  return t;
}

class UntilBody extends Widget {
  constructor(capText: string) {
    super({ node: document.createElement('div') });
    this.addClass('jp-GpuReclaim-until');
    const label = document.createElement('label');
    label.textContent = `Keep the server and its GPU until (at most ${capText}):`;
    this.input = document.createElement('input');
    this.input.type = 'time';
    this.input.required = true;
    this.input.setAttribute('aria-label', 'Keep alive until');
    label.appendChild(document.createElement('br'));
    label.appendChild(this.input);
    this.node.appendChild(label);
  }

  getValue(): string {
    return this.input.value;
  }

  readonly input: HTMLInputElement;
}

class GpuReclaim {
  constructor(settings: ServerConnection.ISettings, statusBar: IStatusBar | null) {
    this.settings = settings;
    this.item = new Widget();
    this.item.addClass('jp-GpuReclaim-status');
    this.text.className = 'jp-GpuReclaim-text';
    this.saveNote.className = 'jp-GpuReclaim-saved';
    this.item.node.append(this.text, this.spark, this.saveNote);
    this.item.hide();
    // while warned, the item shows the warning's actions again (once closed, it stays closed)
    this.item.node.addEventListener('click', () => this.reopen());
    this.item.node.addEventListener('keydown', (event: KeyboardEvent) => {
      if (event.key === 'Enter' || event.key === ' ') {
        event.preventDefault();
        this.reopen();
      }
    });
    if (statusBar) {
      statusBar.registerStatusItem('jupyterhub-gpu-reclaim:status', {
        item: this.item,
        align: 'left',
        rank: 1000,
        // the status bar shows an item when it refreshes its items, unless it is not active
        isActive: () => this.active
      });
    }
  }

  start(): void {
    document.addEventListener('visibilitychange', () => this.poll());
    this.poll();
  }

  /** What the last save before a stop did ("saved 2 at 14:03"), after the state. */
  noteSaved(note: string, title: string): void {
    this.saveNote.textContent = ` · ${note}`;
    this.saveNote.title = title;
    this.setShown(true);
  }

  /**
   * Read the state now and every POLL_MS while the tab is shown; a hidden tab asks nothing
   * (Page Visibility API), as JupyterLab's own polls stand by there: every request the proxy
   * passes to the server is the hub's `last_activity` (docs/lab.md).
   */
  private poll(): void {
    window.clearInterval(this.timer);
    this.timer = undefined;
    if (document.visibilityState === 'hidden' || this.stopped) {
      return;
    }
    void this.refresh();
    this.schedule();
  }

  private schedule(): void {
    window.clearInterval(this.timer);
    this.timer = window.setInterval(() => void this.refresh(), this.notInstalled ? NOT_INSTALLED_POLL_MS : POLL_MS);
  }

  private setShown(on: boolean): void {
    this.active = on;
    if (on) {
      this.item.show();
    } else {
      this.item.hide();
    }
  }

  /** The server is stopping (the reclaim's message is shown): nothing more to ask. */
  serverStopping(): void {
    this.stopped = true;
    window.clearInterval(this.timer);
    this.timer = undefined;
    this.clearWarning();
    this.status = { available: false }; // the status bar item no longer reopens the warning
    this.text.textContent = STOPPING;
    this.item.node.removeAttribute('role');
    this.item.node.removeAttribute('tabindex');
  }

  async refresh(): Promise<void> {
    let status: IStatus = { available: false };
    try {
      const { ok, status: code, body } = await call(this.settings, 'status');
      status = ok ? (body as IStatus) : { available: false };
      if ((code === 404) !== this.notInstalled) {
        // the server side is missing (or back, after a restart): ask rarely, and say it once
        this.notInstalled = code === 404;
        if (this.notInstalled) {
          console.warn(NOT_INSTALLED);
        }
        if (this.timer !== undefined) {
          this.schedule();
        }
      }
    } catch {
      status = { available: false }; // the server is gone or restarting: show nothing
    }
    this.status = status;
    const session = status.available ? status.session ?? null : null;
    const shown = session ? describe(session) : null;
    if (shown) {
      this.text.textContent = shown.text;
      const spark = sparkline(session!) ?? document.createElement('span');
      this.spark.replaceWith(spark);
      this.spark = spark;
      // while warned, the whole reason (the notification cuts a long one) and what a stop keeps and loses
      this.item.node.title =
        session!.state === 'warned'
          ? hoverText(shown.title, whyText(session!), status.keeps, status.loses)
          : shown.title;
      this.item.node.dataset.state = session!.state;
      const actionable = session!.state === 'warned' && !!session!.reclaim_at;
      if (actionable) {
        this.item.node.setAttribute('role', 'button');
        this.item.node.tabIndex = 0;
      } else {
        this.item.node.removeAttribute('role');
        this.item.node.removeAttribute('tabindex');
      }
      this.setShown(true);
    } else if (!this.saveNote.textContent) {
      this.setShown(false);
    }
    if (session && session.state === 'warned' && session.reclaim_at) {
      this.warn(session);
    } else {
      this.clearWarning();
    }
  }

  /** The warning raised again with its actions, from the status bar item. */
  private reopen(): void {
    const s = this.status.available ? this.status.session : null;
    if (s && s.state === 'warned' && s.reclaim_at) {
      this.clearWarning();
      this.warn(s);
    }
  }

  private warn(s: ISession): void {
    // why, in the service's words of what was measured ("nothing has run on the GPU since
    // 08:22", not "idle" for a GPU never used), its times in this browser's zone, cut to
    // what JupyterLab shows of a message; the status bar item's hover text has it whole,
    // and what a stop keeps and loses
    const idle = s.idle_since ? `has been idle for ${ago(s.idle_since)}` : 'is not in use';
    const message = warningMessage(clock(s.reclaim_at!), whyText(s), idle);
    // short labels: the three fit on one line at JupyterLab's toast width (25em); the
    // captions (hover text) say the rest
    const actions: Notification.IAction[] = [
      {
        label: `Keep alive ${KEEP_HOURS} h`,
        caption: `Keep the server and its GPU for ${KEEP_HOURS} hours`,
        callback: () => void this.keepAlive({ hours: KEEP_HOURS }),
        displayType: 'accent'
      },
      {
        label: 'Keep until…',
        caption: 'Keep the server and its GPU until a time',
        callback: (event: MouseEvent) => {
          event.preventDefault(); // the warning stays until the dialog has kept the session
          void this.keepUntil();
        },
        displayType: 'default'
      },
      {
        label: 'Stop now',
        caption: 'Stop the server now and free its GPU',
        callback: () => void this.stop(),
        displayType: 'warn'
      }
    ];
    // the same warning is updated in place; once closed it stays closed (the status bar
    // still shows the countdown), a new warning is raised anew
    if (this.warningFor === s.reclaim_at && this.warningId) {
      Notification.update({ id: this.warningId, message, type: 'warning', autoClose: false, actions });
      return;
    }
    this.clearWarning();
    this.warningId = Notification.warning(message, { autoClose: false, actions });
    this.warningFor = s.reclaim_at;
  }

  private clearWarning(): void {
    if (this.warningId) {
      Notification.dismiss(this.warningId);
    }
    this.warningId = null;
    this.warningFor = null;
  }

  private async keepAlive(body: { hours?: number; until?: string }): Promise<void> {
    const { ok, body: answer } = await call(this.settings, 'keep-alive', {
      method: 'POST',
      body: JSON.stringify(body)
    });
    if (ok && answer.intent_until) {
      Notification.success(`Kept alive until ${clock(answer.intent_until)}`, { autoClose: 5000 });
    } else {
      Notification.error(`Not kept alive: ${answer.message ?? 'the GPU reclaim service did not answer'}`, {
        autoClose: false
      });
    }
    await this.refresh();
  }

  private async keepUntil(): Promise<void> {
    const cap = this.status.max_keepalive_seconds ?? 0;
    const capText = clock(new Date(Date.now() + cap * 1000).toISOString());
    const result = await showDialog({
      title: 'Keep alive until…',
      body: new UntilBody(capText),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Keep alive' })]
    });
    if (!result.button.accept || !result.value) {
      return;
    }
    const until = nextLocal(result.value);
    if (!until) {
      Notification.error(`Not a time HH:MM: ${result.value}`, { autoClose: 5000 });
      return;
    }
    await this.keepAlive({ until: until.toISOString() });
  }

  private async stop(): Promise<void> {
    const { ok, body } = await call(this.settings, 'stop', { method: 'POST' });
    if (ok) {
      Notification.info('Stopping this server: its GPU is freed in a moment', { autoClose: false });
    } else {
      Notification.error(`Not stopped: ${body.message ?? 'the GPU reclaim service did not answer'}`, {
        autoClose: false
      });
    }
    await this.refresh();
  }

  private readonly settings: ServerConnection.ISettings;
  private readonly item: Widget;
  private readonly text = document.createElement('span');
  private readonly saveNote = document.createElement('span');
  private spark: Element = document.createElement('span'); // an empty span: no series
  private status: IStatus = { available: false };
  private warningId: string | null = null;
  private warningFor: string | null = null;
  private timer: number | undefined = undefined;
  private notInstalled = false;
  private stopped = false;
  private active = false;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterhub-gpu-reclaim:plugin',
  description: 'The GPU reclaim state of this server: status bar, warnings, keep-alive',
  autoStart: true,
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null) => {
    const reclaim = new GpuReclaim(app.serviceManager.serverSettings, statusBar);
    reclaim.start();
    new SaveBeforeStop(app, (note, title) => reclaim.noteSaved(note, title)).listen();
    new AfterStop(app, () => reclaim.serverStopping()).listen();
  }
};

export default plugin;
