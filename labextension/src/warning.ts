/**
 * What the warning says (index.ts): why the session is warned, in the service's words of what
 * was measured, and the notification's message, which JupyterLab shows only up to
 * MAX_MESSAGE characters: a long reason is cut there at a word, with "…", and the status bar
 * item's hover text (`hoverText`) has it whole.
 */
import { localClock } from '../../static/localtime';
import { IPart } from './stopped';

/** What JupyterLab shows of a notification's message (`Notification.MAX_MESSAGE_LENGTH` in
 * @jupyterlab/apputils; it cuts the rest). */
export const MAX_MESSAGE = 140;

/** The reason as the service gives it: `why_parts`, and `why` (its times in UTC) from an older service. */
export interface IReason {
  why: string | null;
  why_parts: IPart[];
}

/** Why the session is warned as plain text, '' without one: each time of the service's
 * `why_parts` in the browser's zone ("08:22"), in the notification and the hover text alike;
 * its `why`, times in UTC ("13:22 UTC"), from an older service. */
export function whyText(s: IReason): string {
  const parts = Array.isArray(s.why_parts) ? s.why_parts : [];
  if (!parts.length) {
    return s.why ?? '';
  }
  return parts.map(p => (p.time ? localClock(new Date(p.time)) : p.text)).join('');
}

/** `text` whole where it fits in MAX_MESSAGE characters; else its words that fit, then "…". */
export function fitted(text: string): string {
  if (text.length <= MAX_MESSAGE) {
    return text;
  }
  const room = text.slice(0, MAX_MESSAGE); // the "…" takes the place of at least the space cut at
  const space = room.lastIndexOf(' ');
  const kept = space > 0 ? room.slice(0, space).replace(/[\s,;:(]+$/, '') : room.slice(0, MAX_MESSAGE - 1);
  return kept + '…';
}

/**
 * The notification's message: the stop's time (`at`, in the browser's zone) first, then why
 * (`why`: whyText) or, from an older service without one, how long the GPU is idle (`idle`:
 * "has been idle for 42 min"); never longer than MAX_MESSAGE.
 */
export function warningMessage(at: string, why: string, idle: string): string {
  return fitted(
    why
      ? `Your GPU server is stopped at ${at} unless it is used: ${why}.`
      : `Your GPU ${idle}: this server is stopped at ${at} unless it is used.`
  );
}

/** The warned status bar item's hover text: when (`title`: in the browser's zone, then in
 * UTC), the whole reason (whyText), and what a stop keeps and loses (the service's words;
 * none from an older one). */
export function hoverText(title: string, why: string, keeps?: string, loses?: string): string {
  return [title, why && `Why: ${why}`, keeps && `A stop keeps ${keeps}; it loses ${loses}`]
    .filter(Boolean)
    .map(sentence => `${sentence}.`)
    .join(' ');
}
