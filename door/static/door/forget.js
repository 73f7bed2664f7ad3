// Signed out: a door phone forgets the door's offline list of tickets (their
// digests and numbers). Its queues of offline scans stay, each under its staff
// user's own key, until that user signs in again and the page sends them: they
// hold no secret, and a scan must never be lost.
(function () {
  "use strict";
  try {
    localStorage.removeItem("nightjar-door-list");
  } catch (error) {
    // No storage (private mode): nothing to forget.
  }
})();
