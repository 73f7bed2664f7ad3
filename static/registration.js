// Poll the registration's status and move the page on by itself: from the
// waiting list (with the guest's place) to "Your ticket is being prepared"
// when a seat frees up, then to "Open ticket" when the worker has made it.
// Without JavaScript the page still works: a refresh shows the current state.
(function () {
  "use strict";
  var box = document.getElementById("ticket-state");
  if (!box) return;
  var url = box.getAttribute("data-status-url");
  var delay = 1000;
  var shown = null;

  function paragraph(className, text) {
    var p = document.createElement("p");
    p.className = className;
    p.textContent = text;
    return p;
  }

  function showTicket(ticketUrl) {
    var p = document.createElement("p");
    p.className = "ready";
    var a = document.createElement("a");
    a.className = "button";
    a.href = ticketUrl;
    a.textContent = "Open ticket";
    p.appendChild(a);
    box.replaceChildren(p);
  }

  function showWaiting(place) {
    var line = document.createElement("p");
    line.className = "place";
    line.append("Your place on the waiting list: ");
    var strong = document.createElement("strong");
    strong.textContent = String(place);
    line.appendChild(strong);
    box.replaceChildren(
      paragraph("pending", "The evening is full: you are on the waiting list"),
      line,
      paragraph("hint", "When a seat frees up it goes to the first guest on the list, and this page moves on to your ticket by itself.")
    );
  }

  function show(data) {
    var key = data.state + ":" + data.place;
    if (key === shown) return;  // unchanged: leave the page (and a screen reader) alone
    shown = key;
    if (data.state === "waiting") {
      showWaiting(data.place);
    } else if (data.state === "pending") {
      box.replaceChildren(
        paragraph("pending", "Your ticket is being prepared"),
        paragraph("hint", "This page updates itself.")
      );
    } else if (data.state === "cancelled") {
      box.replaceChildren(paragraph("cancelled", "This registration is cancelled"));
    }
  }

  function poll() {
    fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.json();
      })
      .then(function (data) {
        if (data.ready) {
          showTicket(data.ticket_url);
        } else if (data.state === "cancelled") {
          show(data);  // nothing more will come
        } else {
          show(data);
          setTimeout(poll, delay);
        }
      })
      .catch(function () {
        // Network trouble: back off gently, up to 15 s between tries.
        delay = Math.min(delay * 2, 15000);
        setTimeout(poll, delay);
      });
  }

  setTimeout(poll, delay);
})();
