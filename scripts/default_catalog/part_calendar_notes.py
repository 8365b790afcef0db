from common import API_KEY, LIMIT, A, B, I, O, R, S, api, tool

CAT = "Productivity"

TIME = S("ISO 8601 date-time with offset, e.g. 2025-03-04T15:00:00+01:00.", format="date-time")

CAL = tool("PlanIt Calendar", CAT,
    "Shared calendars: events, meeting invitations, availability search and reminders.",
    [
        api("list_events", "Events on the user's calendar between two times.",
            {"api_key": API_KEY, "time_min": TIME, "time_max": TIME, "calendar_id": S("Calendar; primary if omitted."),
             "query": S("Text to match in titles.")}, ["api_key", "time_min", "time_max"],
            R(events=A(O("Event.", event_id=S("Id."), title=S("Title."), starts_at=S("Start."), ends_at=S("End.")), "Events."))),
        api("find_free_slot", "Find the earliest time when all the given people are free for a meeting of a given length.",
            {"api_key": API_KEY, "attendees": A(S("E-mail.", format="email"), "People who must attend."),
             "duration_minutes": I("Meeting length.", default=30), "earliest": TIME, "latest": TIME,
             "working_hours_only": B("Stay within 9-17 local time.", default=True)},
            ["api_key", "attendees", "duration_minutes"], R(start_time=S("Proposed start."), end_time=S("Proposed end."))),
        api("create_event", "Put a new event or meeting on the calendar, optionally with a video-call link.",
            {"api_key": API_KEY, "title": S("Event title."), "start_time": TIME, "end_time": TIME, "location": S("Place or room."),
             "description": S("Agenda."), "add_video_link": B("Attach a video meeting.", default=False)},
            ["api_key", "title", "start_time", "end_time"], R(event_id=S("Event id."), html_link=S("Link."))),
        api("update_event", "Change the time, title, location or description of an event.",
            {"api_key": API_KEY, "event_id": S("Event id."), "title": S("New title."), "start_time": TIME, "end_time": TIME,
             "location": S("New location.")}, ["api_key", "event_id"], R(event_id=S("Event id."), updated=S("Time."))),
        api("delete_event", "Remove an event and notify its guests that it is cancelled.",
            {"api_key": API_KEY, "event_id": S("Event id."), "notify_guests": B("Send cancellation.", default=True)},
            ["api_key", "event_id"], R(deleted=B("True on success."))),
        api("invite_attendees", "Send meeting invitations for an existing event to more people.",
            {"api_key": API_KEY, "event_id": S("Event id."), "attendees": A(S("E-mail.", format="email"), "Guests."),
             "optional": B("Mark as optional.", default=False)}, ["api_key", "event_id", "attendees"],
            R(event_id=S("Event id."), invited=I("Number invited."))),
        api("respond_to_invite", "Accept, decline or tentatively accept a meeting invitation.",
            {"api_key": API_KEY, "event_id": S("Event id."), "response": S("Answer.", enum=["accepted", "declined", "tentative"]),
             "comment": S("Note to the organiser.")}, ["api_key", "event_id", "response"], R(event_id=S("Event."), response=S("Answer."))),
        api("set_reminder", "Add a pop-up or e-mail reminder some minutes before an event.",
            {"api_key": API_KEY, "event_id": S("Event id."), "minutes_before": I("Lead time.", default=10),
             "method": S("How.", enum=["popup", "email"], default="popup")}, ["api_key", "event_id", "minutes_before"],
            R(reminder_id=S("Reminder id."))),
    ])

NOTES = tool("NoteNest Notes", CAT,
    "Personal notes and checklists with tags and notebooks, searchable and shareable.",
    [
        api("create_note", "Write down a new note or checklist in a notebook.",
            {"api_key": API_KEY, "title": S("Title."), "content": S("Body in markdown."), "notebook": S("Notebook name."),
             "tags": A(S("Tag."), "Tags."), "checklist": A(S("Checklist item."), "Items for a to-do list note.")},
            ["api_key", "title"], R(note_id=S("Note id."))),
        api("search_notes", "Find notes whose title or body contains words, optionally within a tag.",
            {"api_key": API_KEY, "query": S("Words to find."), "tag": S("Tag filter."), "limit": LIMIT}, ["api_key", "query"],
            R(notes=A(O("Note.", note_id=S("Id."), title=S("Title."), snippet=S("Excerpt.")), "Notes."))),
        api("update_note", "Rewrite or append to an existing note.",
            {"api_key": API_KEY, "note_id": S("Note id."), "content": S("New or extra text."), "append": B("Append instead of replace.", default=True)},
            ["api_key", "note_id", "content"], R(note_id=S("Note id."), updated=S("Time."))),
        api("tag_note", "Attach tags to a note.",
            {"api_key": API_KEY, "note_id": S("Note id."), "tags": A(S("Tag."), "Tags to add.")}, ["api_key", "note_id", "tags"],
            R(tags=A(S("Tag."), "All tags now."))),
        api("list_tags", "", {"api_key": API_KEY}, ["api_key"], R(tags=A(O("Tag.", name=S("Tag."), count=I("Notes.")), "Tags."))),
        api("delete_note", "Throw a note away.", {"api_key": API_KEY, "note_id": S("Note id.")}, ["api_key", "note_id"],
            R(deleted=B("True on success."))),
    ])

TOOLS = [CAL, NOTES]
