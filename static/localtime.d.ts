// The JupyterLab extension's view of localtime.js (labextension/src imports it).
/** Each `<time datetime>` under `root` written in the browser's zone ("08:33", "2026-12-05 08:33"). */
export function localTimes(root: ParentNode): void;
/** A moment as the pages write it in the browser's zone: "08:33" today, else "2026-12-05 08:33". */
export function localClock(d: Date): string;
