// The door page: scan continuously, send each new code once with its own id,
// show the answer over the whole screen, with its time, for a few seconds.
// Offline, judge by the list loaded while online (digests of the tickets'
// secrets, and ticket numbers for typed ones) exactly as the server will, and
// queue the scans; send them, in chunks the server accepts, until each one is
// answered: the scans of guests it let in first (another door online would
// admit their tickets again), then the rest, within the server's scan limit. A refused request (signed out, a stale token) is never taken for
// "offline": nothing is admitted on it.
(function () {
  "use strict";
  const root = document.getElementById("door");
  const video = document.getElementById("camera");
  const cameraBox = document.getElementById("camera-box");
  const status = document.getElementById("status");
  const answerBox = document.getElementById("answer");
  const sentence = document.getElementById("sentence");
  const detail = document.getElementById("detail");
  const answeredAt = document.getElementById("answered-at");
  const doorInput = document.getElementById("door-name");
  const typed = document.getElementById("typed");
  // One queue per staff user (the key is opaque): a shared phone never sends one's scans as another's.
  const QUEUE = "nightjar-door-queue:" + root.dataset.user;
  const LIST = "nightjar-door-list";
  const DOOR_NAME = "nightjar-door-name";
  const CHUNK = Math.max(1, Math.min(50, Number(root.dataset.maxSync) || 50));
  const PER_MINUTE = Number(root.dataset.scansPerMinute) || 0; // the server's scan limit (0: none)
  const ANSWER_SECONDS = 6; // then the screen is neutral again: a stale green never shows
  const TYPED = /^(?:([TtRr])-?)?([0-9]{1,9})$/;
  // Every answer with its timings (performance.now() ms), for the browser test.
  const log = (window.doorLog = []);
  let detector = null;
  if ("BarcodeDetector" in window) {
    try {
      detector = new window.BarcodeDetector({ formats: ["qr_code"] });
    } catch (error) {
      detector = null;
    }
  }
  const canvas = document.createElement("canvas");
  const context = canvas.getContext("2d", { willReadFrequently: true });
  let lastCode = null;
  let lastSeen = 0;
  let lastEmpty = 0; // the last frame without a code: a new code entered the view after it
  let busy = false;
  let scanning = false;
  let signedOut = false;
  let slowedUntil = 0; // the server answered 429: the sync waits until then
  let fade = null;

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
  }

  function load(key, empty) {
    try {
      return JSON.parse(localStorage.getItem(key)) || empty;
    } catch (error) {
      return empty;
    }
  }

  function save(key, value) {
    if (Array.isArray(value) && !value.length) localStorage.removeItem(key);
    else localStorage.setItem(key, JSON.stringify(value));
  }

  async function sha256(text) {
    if (!(window.crypto && crypto.subtle)) return null;
    const bytes = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
    return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function plural(n, one, many) {
    return n + " " + (n === 1 ? one : many);
  }

  // The queue as it is sent: the admitted guests' scans first, each part in queue order.
  function sendingOrder(queue) {
    return queue.filter((scan) => scan.admitted).concat(queue.filter((scan) => !scan.admitted));
  }

  function showWaiting() {
    const queue = load(QUEUE, []);
    const waiting = queue.length;
    const queued = waiting ? plural(waiting, "scan", "scans") + " waiting to be sent" : "";
    if (!signedOut && Date.now() < slowedUntil && waiting) {
      // Past the server's limit: say that the guests let in went first, and why the rest wait.
      const admitted = queue.filter((scan) => scan.admitted).length;
      const limit = PER_MINUTE ? "the server's limit of " + PER_MINUTE + " scans a minute" : "the server's limit";
      status.className = "status";
      status.textContent =
        "online — " +
        queued +
        (admitted
          ? ", " + admitted + " of them admitted guests' (sent first), within " + limit
          : ": every admitted guest's scan is sent; the rest follow within " + limit);
      return;
    }
    if (signedOut) {
      status.className = "status signed-out";
      status.textContent =
        "Signed out: reload the page and sign in." + (waiting ? " " + queued + "; they are kept." : "");
      return;
    }
    status.className = "status";
    const how = scanning ? "scanning" : "no camera: type ticket numbers";
    if (navigator.onLine) status.textContent = "online — " + (queued || how);
    else status.textContent = "offline — " + how + (queued ? " — " + queued : "");
  }

  function neutral() {
    answerBox.className = "answer idle";
    sentence.textContent = scanning ? "Hold a ticket's QR code to the camera" : "Type a ticket number below";
    detail.textContent = "";
    answeredAt.textContent = "";
  }

  function show(answer, timing) {
    const repeat = answer.repeated === true;
    answerBox.className = "answer " + (repeat ? "repeat" : answer.colour);
    sentence.textContent = repeat ? "Sent before: " + answer.sentence : answer.sentence;
    detail.textContent =
      answer.colour === "green" && answer.ticket
        ? [answer.registration, answer.ticket].join(" · ")
        : answer.detail || "";
    const now = new Date();
    answeredAt.textContent = "Answered at " + now.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    clearTimeout(fade);
    fade = setTimeout(neutral, ANSWER_SECONDS * 1000);
    if (navigator.vibrate) navigator.vibrate(answer.colour === "green" && !repeat ? 80 : [200, 100, 200]);
    beep(answer.colour === "green" && !repeat ? 880 : answer.colour === "amber" || repeat ? 520 : 220);
    log.push(Object.assign({}, answer, timing));
  }

  // A short tone per answer, once the browser allows sound (after a tap on the page).
  let audio = null;
  document.addEventListener("pointerdown", () => {
    if (!audio && window.AudioContext) audio = new AudioContext();
  });
  function beep(frequency) {
    if (!audio) return;
    try {
      const tone = audio.createOscillator();
      tone.frequency.value = frequency;
      tone.connect(audio.destination);
      tone.start();
      tone.stop(audio.currentTime + 0.15);
    } catch (error) {
      audio = null;
    }
  }

  // What the server said, as {status, data}; a network failure throws.
  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": root.dataset.csrf },
      body: JSON.stringify(body),
    });
    let data = {};
    try {
      data = await response.json();
    } catch (error) {
      data = {};
    }
    return { status: response.status, data: data };
  }

  function refusedAsSignedOut(status) {
    if (status !== 401 && status !== 403) return false;
    signedOut = true;
    localStorage.removeItem(LIST); // signed out, the phone keeps no list of tickets (its queue waits to be sent)
    showWaiting();
    return true;
  }

  // A queue from before this page kept raw codes under one key for every user:
  // it becomes this user's, holding digests instead.
  async function upgradeOldQueue() {
    const old = load("nightjar-door-queue", null);
    if (!Array.isArray(old)) return;
    const queue = load(QUEUE, []);
    for (const scan of old) {
      if (!scan || !scan.scan_id || typeof scan.code !== "string") continue;
      const entry = { scan_id: scan.scan_id, door: scan.door, scanned_at: scan.scanned_at, offline: true, admitted: scan.admitted === true };
      if (scan.typed) Object.assign(entry, { typed: true, code: scan.code });
      else entry.code_sha256 = scan.hash || (await sha256(scan.code.trim()));
      queue.push(entry);
    }
    save(QUEUE, queue);
    localStorage.removeItem("nightjar-door-queue");
  }

  function doorName() {
    return doorInput.value.trim() || "unnamed door";
  }

  async function submit(code, timing) {
    const scan = { scan_id: newId(), code: code, door: doorName(), scanned_at: new Date().toISOString() };
    if (timing.typed) scan.typed = true;
    if (signedOut) {
      show({ colour: "red", sentence: "Signed out: reload the page", detail: "Nothing was checked in." }, timing);
      return;
    }
    if (!navigator.onLine) return judgeOffline(scan, timing);
    let reply;
    try {
      reply = await post(root.dataset.scanUrl, scan);
    } catch (error) {
      // The network dropped mid-request: judge and queue the scan with its id,
      // so a request that did arrive is not counted twice.
      return judgeOffline(scan, timing);
    }
    timing.answeredAt = performance.now();
    if (refusedAsSignedOut(reply.status)) {
      show({ colour: "red", sentence: "Signed out: reload the page", detail: reply.data.error || "Nothing was checked in." }, timing);
    } else if (reply.status >= 500) {
      return judgeOffline(scan, timing); // the server failed: the scan waits for it, judged by the list
    } else if (reply.status !== 200) {
      show({ colour: "red", sentence: reply.data.error || "Refused (" + reply.status + ")", detail: "Nothing was checked in." }, timing);
    } else {
      show(reply.data, timing);
      if (reply.data.colour === "green" && !timing.typed) remember(await sha256(code.trim()));
    }
  }

  // A guest this door let in is in: the list it holds says so until the next refresh.
  function remember(hash, number) {
    const list = load(LIST, { valid: [], checked_in: [], numbers: {} });
    if (hash && !list.checked_in.includes(hash)) {
      list.checked_in.push(hash);
      list.valid = list.valid.filter((known) => known !== hash);
    }
    if (number && list.numbers) list.numbers[number] = "checked_in";
    save(LIST, list);
  }

  // The offline verdict, by the rules the server applies: a scanned code by its
  // digest, a typed one by its number (T-0004, R-0004 or 4, as the server reads it).
  function offlineVerdict(scan, hash, list, queue) {
    let state = null;
    let number = null;
    if (scan.typed) {
      const typedNumber = TYPED.exec(scan.code.trim());
      if (typedNumber) {
        // As the server reads it: "T-00004" and "4" are T-0004.
        number = (typedNumber[1] || "T").toUpperCase() + "-" + String(parseInt(typedNumber[2], 10)).padStart(4, "0");
        state = (list.numbers || {})[number] || null;
      }
    } else if (hash) {
      state = list.checked_in.includes(hash) ? "checked_in" : list.valid.includes(hash) ? "valid" : null;
    }
    const mine = scan.typed ? (q) => q.number === number : (q) => q.code_sha256 === hash;
    if (state === "valid" && queue.some((q) => q.admitted && mine(q))) state = "checked_in";
    return { state: state, number: number };
  }

  async function judgeOffline(scan, timing) {
    const list = load(LIST, { valid: [], checked_in: [], numbers: {} });
    const queue = load(QUEUE, []);
    const hash = scan.typed ? null : await sha256(scan.code.trim());
    const verdict = offlineVerdict(scan, hash, list, queue);
    let answer;
    if (verdict.state === "checked_in") {
      answer = { colour: "amber", sentence: "Already checked in", detail: "By the list this door holds (offline)." };
    } else if (verdict.state === "valid") {
      answer = { colour: "green", sentence: "Welcome", detail: "A valid ticket by the list this door holds (offline)." };
    } else {
      answer = {
        colour: "red",
        sentence: "Not a ticket for this evening",
        detail: "Not in the list this door holds (offline); the guest is not checked in.",
      };
    }
    // Only what the sync needs: the code's digest (never the secret), or the typed number.
    const queued = {
      scan_id: scan.scan_id,
      door: scan.door,
      scanned_at: scan.scanned_at,
      offline: true,
      admitted: answer.colour === "green",
    };
    if (scan.typed) Object.assign(queued, { typed: true, code: scan.code.trim(), number: verdict.number });
    else queued.code_sha256 = hash;
    queue.push(queued);
    save(QUEUE, queue);
    showWaiting();
    show(answer, Object.assign(timing, { answeredAt: performance.now(), offline: true }));
  }

  // Sends the queued scans in chunks the server accepts, until each has its answer;
  // the same chunk sent twice changes nothing (scan ids). One scan's error is that
  // scan's answer: it leaves the queue unless the server says to send it again.
  let syncing = false;
  async function sync() {
    if (syncing || signedOut || !navigator.onLine || Date.now() < slowedUntil) return;
    syncing = true;
    try {
      let sentAll = false;
      while (!sentAll) {
        const queue = load(QUEUE, []);
        if (!queue.length) break;
        const chunk = sendingOrder(queue).slice(0, CHUNK).map(({ number, ...scan }) => scan);
        const reply = await post(root.dataset.syncUrl, { scans: chunk });
        if (reply.status === 429) slowedUntil = Date.now() + 60000;
        if (refusedAsSignedOut(reply.status) || reply.status === 429 || reply.status >= 500) break;
        let answers = reply.data.answers;
        if (reply.status !== 200 || !Array.isArray(answers)) answers = await oneByOne(chunk);
        if (answers === null) break;
        const done = new Set(answers.filter((a) => a.scan_id && !a.retry).map((a) => a.scan_id));
        save(QUEUE, load(QUEUE, []).filter((scan) => !done.has(scan.scan_id)));
        window.doorSynced = (window.doorSynced || 0) + done.size;
        reportConflicts(answers);
        if (answers.some((a) => a.retry)) slowedUntil = Date.now() + 60000; // past the limit, or not recorded now
        if (!done.size || answers.some((a) => a.retry)) break; // the rest waits for the next round
        sentAll = queue.length <= CHUNK;
      }
    } finally {
      syncing = false;
      window.doorSyncs = (window.doorSyncs || 0) + 1;
      showWaiting();
    }
  }

  // A chunk the server refused whole: each scan on its own, so one bad scan holds back none.
  async function oneByOne(chunk) {
    const answers = [];
    for (const scan of chunk) {
      const reply = await post(root.dataset.scanUrl, scan);
      if (refusedAsSignedOut(reply.status) || reply.status === 429 || reply.status >= 500) return answers.length ? answers : null;
      answers.push(reply.status === 200 ? reply.data : { scan_id: scan.scan_id, error: reply.data.error || "refused" });
    }
    return answers;
  }

  function reportConflicts(answers) {
    const conflicts = answers.filter((answer) => answer.conflict);
    if (conflicts.length) {
      show(
        {
          colour: "amber",
          sentence: `Conflict: ${conflicts.map((answer) => answer.ticket).join(", ")} let in twice`,
          detail: conflicts[0].sentence + "; the desk lists it.",
        },
        { synced: true },
      );
    }
  }

  async function refreshList() {
    if (!navigator.onLine || signedOut) return;
    const response = await fetch(root.dataset.ticketsUrl, { credentials: "same-origin" });
    if (refusedAsSignedOut(response.status)) return;
    if (response.ok) {
      save(LIST, await response.json());
      window.doorListLoaded = true;
    }
  }

  function online() {
    showWaiting();
    sync()
      .then(refreshList)
      .catch(() => null)
      .finally(showWaiting);
  }

  async function decode() {
    if (detector) {
      const found = await detector.detect(video);
      return found.length ? found[0].rawValue : null;
    }
    const width = video.videoWidth;
    const height = video.videoHeight;
    if (!width) return null;
    const scale = Math.min(1, 640 / width);
    canvas.width = Math.round(width * scale);
    canvas.height = Math.round(height * scale);
    context.drawImage(video, 0, 0, canvas.width, canvas.height);
    const image = context.getImageData(0, 0, canvas.width, canvas.height);
    const code = window.jsQR(image.data, image.width, image.height, { inversionAttempts: "dontInvert" });
    return code ? code.data : null;
  }

  async function tick() {
    const started = performance.now();
    let code = null;
    try {
      code = await decode();
    } catch (error) {
      code = null;
    }
    if (code === null) {
      if (started - lastSeen > 1500) lastCode = null; // out of view: the same ticket may come again
      lastEmpty = started;
    } else {
      if (code !== lastCode && !busy) {
        lastCode = code;
        busy = true;
        const timing = { emptyAt: lastEmpty, seenAt: started, decodedAt: performance.now() };
        submit(code, timing).finally(() => (busy = false));
      }
      lastSeen = started;
    }
    setTimeout(tick, 50);
  }

  async function start() {
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
      video.srcObject = stream;
      cameraBox.hidden = false;
      await video.play();
    } catch (error) {
      cameraBox.hidden = true;
      scanning = false;
      neutral();
      showWaiting();
      return;
    }
    scanning = true;
    window.doorDecoder = detector ? "BarcodeDetector" : "jsQR";
    neutral();
    showWaiting();
    tick();
  }

  typed.addEventListener("submit", (event) => {
    event.preventDefault();
    const field = document.getElementById("ticket-number");
    if (!field.value.trim()) return;
    submit(field.value.trim(), { typed: true, seenAt: performance.now() });
    field.value = "";
  });
  // Each phone remembers its own door's name (asked once, not "door 1" for all).
  doorInput.value = root.dataset.door || localStorage.getItem(DOOR_NAME) || "";
  doorInput.addEventListener("change", () => localStorage.setItem(DOOR_NAME, doorInput.value.trim()));
  window.addEventListener("online", online);
  window.addEventListener("offline", showWaiting);
  setInterval(online, 15000);
  upgradeOldQueue().catch(() => null).finally(online);
  start();
})();
