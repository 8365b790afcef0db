from common import API_KEY, LIMIT, A, B, I, O, R, S, api, tool

CAT = "Communication"

CHAT = tool("ChatterBox Messaging", CAT,
    "Team chat workspace: channels, direct messages, threads, reactions and user presence.",
    [
        api("list_channels", "List the chat channels in the workspace that the bot can see, with topics and member counts.",
            {"api_key": API_KEY, "include_private": B("Include private channels.", default=False), "limit": LIMIT}, ["api_key"],
            R(channels=A(O("Channel.", channel_id=S("Id."), name=S("Name."), topic=S("Topic.")), "Channels."))),
        api("create_channel", "Open a new public or private chat channel for a team or project.",
            {"api_key": API_KEY, "name": S("Channel name, lowercase, no spaces."), "private": B("Private channel.", default=False),
             "topic": S("Channel topic.")}, ["api_key", "name"], R(channel_id=S("Id of the new channel."))),
        api("post_message", "Write a message into a channel or a thread; supports mentions and markdown.",
            {"api_key": API_KEY, "channel_id": S("Channel id."), "text": S("Message text."),
             "thread_ts": S("Parent message timestamp to reply in a thread.")},
            ["api_key", "channel_id", "text"], R(ts=S("Timestamp id of the posted message."))),
        api("invite_to_channel", "Add people to a channel by their user ids.",
            {"api_key": API_KEY, "channel_id": S("Channel id."), "member_ids": A(S("Chat member id."), "People to add.")},
            ["api_key", "channel_id", "member_ids"], R(channel_id=S("Channel."), member_count=I("Members now."))),
        api("send_direct_message", "Privately message one person in the workspace.",
            {"api_key": API_KEY, "member_id": S("Chat member id of the recipient."), "text": S("Message text.")},
            ["api_key", "member_id", "text"], R(ts=S("Message timestamp."))),
        api("channel_history", "Read the latest messages posted in a channel.",
            {"api_key": API_KEY, "channel_id": S("Channel id."), "limit": LIMIT, "oldest": S("Only after this timestamp.")},
            ["api_key", "channel_id"], R(messages=A(O("Message.", ts=S("Timestamp."), author_id=S("Chat member id of the author."), text=S("Text.")), "Messages."))),
        api("add_reaction", "React to a message with an emoji.",
            {"api_key": API_KEY, "channel_id": S("Channel id."), "ts": S("Message timestamp."), "emoji": S("Emoji name, e.g. thumbsup.")},
            ["api_key", "channel_id", "ts", "emoji"], R(ok=B("True on success."))),
        api("set_status", "Set your chat status text, emoji and expiry (e.g. 'in a meeting', 'on holiday').",
            {"api_key": API_KEY, "status_text": S("Status text."), "status_emoji": S("Emoji."), "expires_at": S("ISO 8601 time.")},
            ["api_key", "status_text"], R(ok=B("True on success."))),
    ])

SMS = tool("TextLine SMS", CAT,
    "SMS and voice messaging: texts, phone-number verification codes and number lookup.",
    [
        api("send_sms", "Send a text message to a mobile phone number.",
            {"api_key": API_KEY, "phone": S("Recipient number in E.164 format, e.g. +14155550123."), "message": S("Text, up to 1600 chars."),
             "sender_id": S("Alphanumeric sender name or number.")}, ["api_key", "phone", "message"],
            R(sms_id=S("Message id."), segments=I("Billed segments."))),
        api("sms_status", "Delivery status of a sent text (queued, delivered, failed).",
            {"api_key": API_KEY, "sms_id": S("Message id.")}, ["api_key", "sms_id"],
            R(sms_id=S("Message id."), status=S("Status.", enum=["queued", "sent", "delivered", "failed"]))),
        api("send_verification_code", "Text or call a one-time code to a phone to prove the user owns it.",
            {"api_key": API_KEY, "phone": S("Number in E.164 format."), "channel": S("Delivery.", enum=["sms", "voice"], default="sms")},
            ["api_key", "phone"], R(verification_id=S("Id of the pending verification."))),
        api("check_verification_code", "Check the code the user typed against the pending phone verification.",
            {"api_key": API_KEY, "verification_id": S("Pending verification id."), "code": S("Code entered by the user.")},
            ["api_key", "verification_id", "code"], R(valid=B("Whether the code matched."))),
        api("lookup_number", "Identify the carrier, line type (mobile/landline/VoIP) and country of a phone number.",
            {"api_key": API_KEY, "phone": S("Number in any format.")}, ["api_key", "phone"],
            R(carrier=S("Carrier."), line_type=S("Line type."), country=S("Country code."))),
        api("place_voice_call", "Ring a phone and read a message aloud using text-to-speech.",
            {"api_key": API_KEY, "phone": S("Number in E.164 format."), "speech_text": S("What to say."), "voice": S("Voice.", enum=["female", "male"])},
            ["api_key", "phone", "speech_text"], R(call_id=S("Call id."))),
    ])

TOOLS = [CHAT, SMS]
